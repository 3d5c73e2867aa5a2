package httpapi_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

// A run's id belongs to its owner: two clients may each have a run "same", each sees its own,
// and neither learns the other's exists.
func TestRunIDsBelongToTheirOwner(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	bob, carol := apitest.Client("bob"), apitest.Client("carol")
	aliceRun := oneNodeRun("same", "board", "alice-step")
	bobRun := oneNodeRun("same", "board", "bob-step-1", "bob-step-2")
	if resp := env.Do(alice, "POST", "/v1/runs", aliceRun); resp.Status != 201 {
		t.Fatalf("alice's same: %s", resp)
	}
	if resp := env.Do(bob, "POST", "/v1/runs", bobRun); resp.Status != 202 {
		t.Fatalf("bob's same: %s, want 202 (queued behind alice's on the one board)", resp)
	}
	for who, steps := range map[string]int{"alice": 1, "bob": 2} {
		var got runReply
		env.Do(apitest.Client(who), "GET", "/v1/runs/same", nil).Decode(t, &got)
		if got.Run.RunID != "same" || len(got.Run.Steps) != steps || got.Run.Owner != "" || got.Run.Key != "" {
			t.Errorf("%s's GET of same: %+v; want its own run of %d step(s), without owner or key", who, got.Run, steps)
		}
	}
	// The same request again is each owner's own resubmission.
	if resp := env.Do(bob, "POST", "/v1/runs", bobRun); resp.Status != 200 {
		t.Errorf("bob's same again: %s", resp)
	}

	// To a third client, someone's run and no one's are the same 404, byte for byte but the
	// request id; its cancel too; a client's priority is 403 whatever the id.
	requestID := regexp.MustCompile(`"request_id":"[^"]*"`)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/runs/%s"}, {"POST", "/v1/runs/%s/cancel"}, {"POST", "/v1/runs/%s/priority"},
	} {
		var body any
		if c.path == "/v1/runs/%s/priority" {
			body = map[string]any{"priority": 60}
		}
		someone := env.Do(carol, c.method, fmt.Sprintf(c.path, "same"), body)
		no := env.Do(carol, c.method, fmt.Sprintf(c.path, "nobodys"), body)
		a, b := requestID.ReplaceAll(someone.Body, nil), requestID.ReplaceAll(no.Body, nil)
		if someone.Status != no.Status || !bytes.Equal(a, b) {
			t.Errorf("%s %s: another's run answers %d %s; no run, %d %s", c.method, c.path, someone.Status, a, no.Status, b)
		}
	}
	if resp := env.Do(carol, "GET", "/v1/runs/same?owner=client:alice", nil); resp.Status != 403 {
		t.Errorf("a client naming an owner: %s, want 403", resp)
	}

	// An admin: the id names two runs — 409 naming both owners — until the owner is given; the
	// run's key names one run, and an admin sees owner and key.
	resp := env.Do(apitest.Admin, "GET", "/v1/runs/same", nil)
	var problem struct {
		Code   string   `json:"code"`
		Owners []string `json:"owners"`
	}
	resp.Decode(t, &problem)
	if resp.Status != 409 || problem.Code != "run_id_ambiguous" || fmt.Sprint(problem.Owners) != "[client:alice client:bob]" {
		t.Fatalf("an admin's GET of same: %s", resp)
	}
	var bobs runReply
	env.Do(apitest.Admin, "GET", "/v1/runs/same?owner=client:bob", nil).Decode(t, &bobs)
	if bobs.Run.Owner != "client:bob" || bobs.Run.Key == "" || bobs.Run.Key == "same" || len(bobs.Run.Steps) != 2 {
		t.Fatalf("an admin's GET of bob's same: %+v; want bob's, with a key of its own", bobs.Run)
	}
	var byKey runReply
	env.Do(apitest.Admin, "GET", "/v1/runs/"+bobs.Run.Key, nil).Decode(t, &byKey)
	if byKey.Run.Owner != "client:bob" || byKey.Run.Key != bobs.Run.Key {
		t.Fatalf("an admin's GET by key: %+v", byKey.Run)
	}

	// Nodes name a run by its key: alice's finishes on A, and A is handed bob's under its key.
	env.Finish("A", "b1", "same", wire.ReportSucceeded)
	_, beat := env.Beat("A", "b1", false, "board")
	if beat.Lease == nil || beat.Lease.RunID != bobs.Run.Key {
		t.Fatalf("A's lease: %+v, want bob's run by its key %s", beat.Lease, bobs.Run.Key)
	}
	env.Finish("A", "b1", bobs.Run.Key, wire.ReportSucceeded)
	var done runReply
	env.Do(bob, "GET", "/v1/runs/same", nil).Decode(t, &done)
	if done.Run.State != wire.Succeeded {
		t.Fatalf("bob's same after its node reported by key: %s", done.Run.State)
	}
}

// Many submits of one id by two owners at once store exactly one run per owner.
func TestConcurrentSubmitsOfOneIDByTwoOwners(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(16))
	env.Beat("A", "b1", false, "board")
	owners := []string{"alice", "bob"}
	var wg sync.WaitGroup
	statuses := make([]int, 30)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = env.Do(apitest.Client(owners[i%2]), "POST", "/v1/runs", oneNodeRun("nightly", "board")).Status
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 && s != 201 && s != 202 {
			t.Errorf("submit %d by %s: %d", i, owners[i%2], s)
		}
	}
	for _, o := range owners {
		if n := env.Count(`SELECT count(*) FROM runs WHERE owner = $1 AND name = 'nightly'`, "client:"+o); n != 1 {
			t.Errorf("%s has %d runs named nightly", o, n)
		}
	}
	if n := env.Count(`SELECT count(DISTINCT run_id) FROM runs WHERE name = 'nightly'`); n != 2 {
		t.Errorf("%d keys for two owners' runs", n)
	}
	env.CheckInvariants()
}

// The run list shows each client its own; an admin's shows every run with its owner and key, and
// a client's page cursor says nothing of keys.
func TestRunListsAreTheOwners(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	for _, who := range []string{"alice", "bob"} {
		for i := range 3 {
			if resp := env.Do(apitest.Client(who), "POST", "/v1/runs", oneNodeRun(fmt.Sprintf("r%d", i), "gpu")); resp.Status != 422 {
				t.Fatalf("%s r%d: %s", who, i, resp)
			}
		}
	}
	var page struct {
		Runs []struct {
			RunID, Owner, Key string
		} `json:"runs"`
		Next *string `json:"next"`
	}
	// Bob's runs came second: their keys are not their ids, and his cursor names none of them.
	bob := apitest.Client("bob")
	env.Do(bob, "GET", "/v1/runs?limit=2", nil).Decode(t, &page)
	if len(page.Runs) != 2 || page.Runs[0].Owner != "" || page.Next == nil {
		t.Fatalf("bob's first page: %+v", page)
	}
	cursor, err := base64.RawURLEncoding.DecodeString(*page.Next)
	if err != nil || bytes.Contains(cursor, []byte(".")) {
		t.Fatalf("bob's cursor %q: %v; it must not hold a key", cursor, err)
	}
	env.Do(bob, "GET", "/v1/runs?limit=2&after="+*page.Next, nil).Decode(t, &page)
	if len(page.Runs) != 1 || page.Next != nil {
		t.Fatalf("bob's second page: %+v", page)
	}
	var all struct {
		Runs []struct {
			RunID string `json:"run_id"`
			Owner string `json:"owner"`
			Key   string `json:"key"`
		} `json:"runs"`
	}
	env.Do(apitest.Admin, "GET", "/v1/runs", nil).Decode(t, &all)
	keys := map[string]bool{}
	for _, r := range all.Runs {
		if r.Owner == "" || r.Key == "" {
			t.Fatalf("an admin's list without owner or key: %+v", r)
		}
		keys[r.Key] = true
	}
	if len(all.Runs) != 6 || len(keys) != 6 {
		t.Fatalf("an admin's list: %+v", all.Runs)
	}
}

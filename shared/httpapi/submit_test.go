package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

var alice = apitest.Client("alice")

func oneNodeRun(id, need string, steps ...string) map[string]any {
	if len(steps) == 0 {
		steps = []string{"s1"}
	}
	var list []map[string]any
	for _, s := range steps {
		list = append(list, map[string]any{"id": s, "spec": map[string]any{"cmd": "true"}})
	}
	return map[string]any{"run_id": id, "needs": []string{need}, "steps": list}
}

type runReply struct {
	Run   store.Run `json:"run"`
	Unmet []struct {
		Role  string   `json:"role"`
		Needs []string `json:"needs"`
	} `json:"unmet"`
}

// Every outcome of a submission through the submit handler: fleet {A: board=rpi4}, a held by A.
func TestSubmitOutcomes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board=rpi4")

	resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("a", "board=rpi4"))
	var a runReply
	resp.Decode(t, &a)
	if resp.Status != 201 || a.Run.State != wire.Running || a.Run.Assigned["main"] != "A" || a.Run.Roles["main"].NodeID != "A" {
		t.Fatalf("a: %s", resp)
	}

	resp = env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board=rpi4"))
	var b runReply
	resp.Decode(t, &b)
	if resp.Status != 202 || b.Run.State != wire.Queued || b.Run.Roles["main"].NodeID != "" {
		t.Fatalf("b: %s", resp)
	}
	if strings.Contains(string(resp.Body), `"assigned"`) || strings.Contains(string(resp.Body), `"reject"`) {
		t.Fatalf("a queued run carries no assigned and no reject: %s", resp.Body)
	}
	if b.Run.QueuePosition == nil || *b.Run.QueuePosition != 0 {
		t.Fatalf("b's queue position: %v", b.Run.QueuePosition)
	}
	if n := env.Count(`SELECT count(*) FROM leases WHERE run_id = 'b'`); n != 0 {
		t.Fatalf("queued b holds %d leases", n)
	}

	resp = env.Do(alice, "POST", "/v1/runs", oneNodeRun("c", "gpu"))
	var c runReply
	resp.Decode(t, &c)
	if resp.Status != 422 || c.Run.State != wire.Failed || c.Run.Reason == nil || *c.Run.Reason != wire.ReasonNoCapableNode ||
		len(c.Unmet) != 1 || c.Unmet[0].Role != "main" || c.Unmet[0].Needs[0] != "gpu" {
		t.Fatalf("c: %s", resp)
	}
	if got := env.Do(alice, "GET", "/v1/runs/c", nil); got.Status != 200 {
		t.Fatalf("the FAILED run c is stored: %s", got)
	}

	resp = env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board=rpi4"))
	var again runReply
	resp.Decode(t, &again)
	if resp.Status != 200 || again.Run.RunID != "b" || again.Run.State != wire.Queued {
		t.Fatalf("resubmit b: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board=rpi4", "s1", "s2")); resp.Status != 409 ||
		!strings.Contains(string(resp.Body), "run_id_conflict") {
		t.Fatalf("b with another step: %s", resp)
	}
	// Another client's id is its own: the same id is a run of its own, and says nothing of alice's.
	if resp := env.Do(apitest.Client("mallory"), "POST", "/v1/runs", oneNodeRun("b", "board=rpi4")); resp.Status != 202 {
		t.Fatalf("b by another client: %s", resp)
	}

	before := env.Count(`SELECT count(*) FROM runs`)
	resp = env.Do(alice, "POST", "/v1/runs?dry_run=true", oneNodeRun("b-dry", "board=rpi4"))
	var dry struct {
		Verdict string `json:"verdict"`
		Width   int    `json:"width"`
	}
	resp.Decode(t, &dry)
	if resp.Status != 200 || dry.Verdict != "busy" || dry.Width != 1 {
		t.Fatalf("dry run: %s", resp)
	}
	if after := env.Count(`SELECT count(*) FROM runs`); after != before {
		t.Fatalf("the dry run stored something: %d runs, then %d", before, after)
	}
}

func TestSubmitWaitForCapacityAndTooWide(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	run := oneNodeRun("elastic", "gpu")
	run["wait_for_capacity"] = true
	if resp := env.Do(alice, "POST", "/v1/runs", run); resp.Status != 202 {
		t.Fatalf("wait_for_capacity: %s", resp)
	}
	roles := map[string]any{}
	var steps []map[string]any
	for i := range 17 {
		roles[fmt.Sprintf("r%d", i)] = map[string]any{"needs": []string{"board"}}
		steps = append(steps, map[string]any{"id": fmt.Sprintf("s%d", i), "role": fmt.Sprintf("r%d", i)})
	}
	resp := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "wide", "roles": roles, "steps": steps})
	var wide runReply
	resp.Decode(t, &wide)
	if resp.Status != 422 || wide.Run.Reason == nil || *wide.Run.Reason != wire.ReasonTooWide {
		t.Fatalf("17 roles with MAX_RUN_WIDTH 16: %s", resp)
	}
}

// A malformed request is 400 with every problem's path, and stores nothing.
func TestSubmitRejectsMalformed(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	body := `{"run_id": "bad id!", "roles": {"dut": {"needs": ["board=rpi4", "no spaces"]}},
	  "steps": [{"id": "a", "role": "dut", "after": ["b"]}, {"id": "b", "role": "dut", "after": ["a"]},
	            {"id": "c", "role": "ghost", "after": ["nope"]}], "max_attempts": 0, "colour": "red"}`
	resp := env.Do(alice, "POST", "/v1/runs", body)
	if resp.Status != 400 {
		t.Fatalf("malformed: %s", resp)
	}
	for _, path := range []string{`"run_id"`, `"roles.dut.needs[1]"`, `"steps[0].after"`, `"steps[1].after"`,
		`"steps[2].role"`, `"steps[2].after[0]"`, `"max_attempts"`, `"colour"`} {
		if !strings.Contains(string(resp.Body), `"path":`+path) {
			t.Errorf("no problem at %s in %s", path, resp.Body)
		}
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("a malformed request stored %d runs", n)
	}
}

func TestSubmitNeedsAClient(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	if resp := env.Do(apitest.Nobody, "POST", "/v1/runs", oneNodeRun("x", "a")); resp.Status != 401 {
		t.Fatalf("no principal: %s", resp)
	}
	if resp := env.Do(apitest.Node("n1"), "POST", "/v1/runs", oneNodeRun("x", "a")); resp.Status != 403 {
		t.Fatalf("a node submitting: %s", resp)
	}
}

// 50 goroutines submit the same run_id at once: one row, one 201 or 202, 200 for the rest.
func TestConcurrentSubmitsOfOneRunID(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(24))
	env.Heartbeat("A", "b1", false, "board=rpi4")
	statuses := make(chan int, 50)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- env.Do(alice, "POST", "/v1/runs", oneNodeRun("same", "board=rpi4")).Status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[201]+count[202] != 1 || count[200] != 49 {
		t.Fatalf("statuses %v", count)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE run_id = 'same'`); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

// The submit answers from what it stored, without reading the run back: the answer must be
// the run as GET shows it, for every outcome.
func TestSubmitAnswerIsTheStoredRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	bodies := map[string]map[string]any{
		"placed": {"run_id": "placed", "roles": map[string]any{"x": map[string]any{"needs": []string{"board"}}},
			"steps":    []map[string]any{{"id": "a", "role": "x", "retries": 2}, {"id": "b", "role": "x", "after": []string{"a"}}},
			"metadata": map[string]any{"z": 1, "a": []any{"x", true}}, "timeout_seconds": 60, "max_attempts": 3},
		"queued": oneNodeRun("queued", "board"),
		"failed": oneNodeRun("failed", "gpu"),
	}
	for _, name := range []string{"placed", "queued", "failed"} {
		resp := env.Do(alice, "POST", "/v1/runs", bodies[name])
		var answered, got map[string]any
		resp.Decode(t, &answered)
		env.Do(alice, "GET", "/v1/runs/"+name, nil).Decode(t, &got)
		a, _ := json.Marshal(answered["run"])
		g, _ := json.Marshal(got["run"])
		if string(a) != string(g) {
			t.Errorf("%s: the submit answered\n%s\nGET shows\n%s", name, a, g)
		}
	}
}

// What a submit costs: a run placed at once is one transaction (the read of the fleet and the
// insert) and no wake; a run that queues is that, then the wake after its commit, which finds
// nothing to place and is one statement, then the one read that says why it waits.
func TestSubmitTransactions(t *testing.T) {
	t.Parallel()
	var counter pgcount.Counter
	env := apitest.New(t, apitest.Tracer(&counter))
	env.Beat("A", "b1", false, "board")
	for _, c := range []struct {
		run    string
		status int
		txs    int64
	}{{"placed", 201, 1}, {"queued", 202, 3}} {
		before := counter.Read()
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun(c.run, "board")); resp.Status != c.status {
			t.Fatalf("%s: %s", c.run, resp)
		}
		if txs := counter.Read().Since(before).Txs; txs != c.txs {
			t.Fatalf("a submit %s used %d transactions; want %d", c.run, txs, c.txs)
		}
	}
}

// A run the submit queues and its own wake then places is answered 201 as the promotion left
// it — RUNNING on its node, the same run GET shows — without reading it again. Here the wake
// takes it, by its priority, before an older run of lower priority that a free node waited for
// (its reporter's wake never came); the submit counted every queued run as ahead.
func TestAQueuedSubmitItsWakePlacesAnswers201(t *testing.T) {
	t.Parallel()
	var tags pgcount.Tags
	env := apitest.New(t, apitest.Tracer(&tags))
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("first", "board")); resp.Status != 201 {
		t.Fatalf("first: %s", resp)
	}
	low := oneNodeRun("low", "board")
	low["priority"] = 10
	if resp := env.Do(alice, "POST", "/v1/runs", low); resp.Status != 202 {
		t.Fatalf("low: %s", resp)
	}
	ctx := context.Background()
	epoch := env.Epoch("A")
	for _, status := range []string{wire.ReportStarted, wire.ReportSucceeded} {
		p := wire.Report{RunID: "first", StepID: "s1", NodeID: "A", BootID: "b1", Epoch: epoch, Status: status}
		if status == wire.ReportSucceeded {
			p.ExitCode = new(int)
		}
		if _, err := env.Store.Report(ctx, p); err != nil { // a report whose wake never came
			t.Fatal(err)
		}
	}
	env.Exec(`UPDATE free_nodes SET held_until = NULL WHERE node_id = 'A'`) // its hold ended

	high := oneNodeRun("high", "board")
	high["priority"] = 50
	mark := tags.Mark()
	resp := env.Do(alice, "POST", "/v1/runs", high)
	sent := tags.Since(mark)
	var answered, got map[string]any
	resp.Decode(t, &answered)
	if resp.Status != 201 {
		t.Fatalf("high: %s", resp)
	}
	if slices.Contains(sent, "runs: get") || slices.Contains(sent, "wake: next of shape") {
		t.Fatalf("the submit sent %v: it read again what its promotion and its read had told it", sent)
	}
	env.Do(alice, "GET", "/v1/runs/high", nil).Decode(t, &got)
	a, _ := json.Marshal(answered["run"])
	g, _ := json.Marshal(got["run"])
	if string(a) != string(g) {
		t.Fatalf("the submit answered\n%s\nGET shows\n%s", a, g)
	}
}

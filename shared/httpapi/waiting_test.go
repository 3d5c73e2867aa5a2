package httpapi_test

import (
	"slices"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// queuedAnswer is a submit's 202.
type queuedAnswer struct {
	Run      store.Run `json:"run"`
	Warnings []struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"warnings"`
}

// why is a run's waiting as who reads it through GET /v1/runs/{run_id}.
func why(env *apitest.Env, who auth.Principal, run string) *store.WhyWaiting {
	env.T.Helper()
	var got struct{ Run store.Run }
	env.Do(who, "GET", "/v1/runs/"+run, nil).Decode(env.T, &got)
	return got.Run.Waiting
}

func busyRunIDs(role store.WaitingRole) []string {
	var ids []string
	for _, b := range role.BusyRuns {
		ids = append(ids, b.RunID+"/"+b.Owner)
	}
	slices.Sort(ids)
	return ids
}

// A queued run says why it waits, from the fleet as it stands, through every change of it: the
// roles that cannot all fit the one free board, every board busy (the busy runs shown to those
// who may see them), every board out of scheduling, a role whose only node is offline and one
// that no node has — those two warned of at submit — and the queue's counts of live nodes.
func TestAQueuedRunSaysWhyItWaits(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	bob := apitest.Client("bob")
	env.Beat("A", "a1", false, "board")
	env.Beat("B", "b1", false, "board")
	env.Beat("G", "g1", false, "gpu")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("one", "board")); resp.Status != 201 {
		t.Fatalf("one: %s", resp)
	}
	pair := map[string]any{"run_id": "pair",
		"roles": map[string]any{"left": map[string]any{"needs": []string{"board"}}, "right": map[string]any{"needs": []string{"board"}}},
		"steps": []map[string]any{{"id": "l", "role": "left", "spec": map[string]any{"cmd": "true"}},
			{"id": "r", "role": "right", "spec": map[string]any{"cmd": "true"}}}}
	resp := env.Do(alice, "POST", "/v1/runs", pair)
	var q queuedAnswer
	resp.Decode(t, &q)
	w := q.Run.Waiting
	if resp.Status != 202 || w == nil || w.Reason != wire.WaitNotAllRoles || len(w.Roles) != 2 || len(q.Warnings) != 0 {
		t.Fatalf("two boards wanted, one free: %s", resp)
	}
	for _, r := range w.Roles {
		if r.Available != 1 || r.Busy != 1 || r.Total() != 2 || !slices.Equal(busyRunIDs(r), []string{"one/"}) {
			t.Fatalf("role %s: %+v", r.Role, r)
		}
	}
	// Bob's run backfills past the pair onto the free board.
	if resp := env.Do(bob, "POST", "/v1/runs", oneNodeRun("bobs", "board")); resp.Status != 201 {
		t.Fatalf("bobs: %s", resp)
	}
	w = why(env, alice, "pair")
	if w.Reason != wire.WaitAllBusy || w.Roles[0].Busy != 2 || !slices.Equal(busyRunIDs(w.Roles[0]), []string{"one/"}) {
		t.Fatalf("every board busy, as alice sees it (bob's run hidden): %+v", w)
	}
	w = why(env, apitest.Admin, "pair")
	if w.Reason != wire.WaitAllBusy || !slices.Equal(busyRunIDs(w.Roles[0]), []string{"bobs/client:bob", "one/client:alice"}) {
		t.Fatalf("every board busy, as an admin sees it: %+v", w.Roles[0])
	}
	// Out of scheduling, the boards are no longer busy but unavailable: they will not free.
	env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "flaky"})
	env.Do(apitest.Admin, "POST", "/v1/nodes/B/drain", nil)
	w = why(env, alice, "pair")
	if r := w.Roles[1]; w.Reason != wire.WaitUnavailable || r.Quarantined != 1 || r.Draining != 1 || r.Busy != 0 {
		t.Fatalf("one board quarantined, one drained: %+v", w)
	}
	// The gpu node's advert expires.
	env.Exec(`UPDATE nodes SET advert_expires_at = now() - interval '1 second' WHERE node_id = 'G'`)
	resp = env.Do(alice, "POST", "/v1/runs", oneNodeRun("train", "gpu"))
	q = queuedAnswer{}
	resp.Decode(t, &q)
	if resp.Status != 202 || q.Run.Waiting.Reason != wire.WaitNoLiveNode || q.Run.Waiting.Roles[0].Offline != 1 ||
		len(q.Warnings) != 1 || q.Warnings[0].Code != wire.WaitNoLiveNode {
		t.Fatalf("a run only an offline node could serve: %s", resp)
	}
	tpu := oneNodeRun("tpu", "tpu")
	tpu["wait_for_capacity"] = true
	resp = env.Do(alice, "POST", "/v1/runs", tpu)
	q = queuedAnswer{}
	resp.Decode(t, &q)
	if resp.Status != 202 || q.Run.Waiting.Reason != wire.WaitForCapacity || len(q.Warnings) != 1 || q.Warnings[0].Code != wire.WaitForCapacity {
		t.Fatalf("a run no node of the fleet could serve, waiting for capacity: %s", resp)
	}
	// The list says why of every queued run on its page, and of no other.
	var page struct{ Runs []store.Run }
	env.Do(alice, "GET", "/v1/runs", nil).Decode(t, &page)
	for _, r := range page.Runs {
		if (r.State == wire.Queued) != (r.Waiting != nil) {
			t.Fatalf("listed %s %s with waiting %+v", r.RunID, r.State, r.Waiting)
		}
	}
	var view store.QueueView
	env.Do(alice, "GET", "/v1/queue", nil).Decode(t, &view)
	if view.Fleet != (store.FleetCount{Nodes: 3, Live: 2}) {
		t.Fatalf("the queue's fleet: %+v", view.Fleet)
	}
	for _, e := range view.Queue {
		if e.Waiting == nil {
			t.Fatalf("queue entry %v without waiting", e.Needs)
		}
		want := map[string][3]int{"board": {2, 2, 0}, "gpu": {1, 0, 0}, "tpu": {0, 0, 0}}[e.Needs[0][0]]
		if got := [3]int{e.CapableNodes, e.LiveNodes, e.AvailableNodes}; got != want {
			t.Fatalf("queue entry %v: capable, live, available %v, want %v", e.Needs, got, want)
		}
	}
	var asAdmin store.QueueView
	env.Do(apitest.Admin, "GET", "/v1/queue", nil).Decode(t, &asAdmin)
	for i, e := range asAdmin.Queue {
		if e.OldestRunOwner != "client:alice" || view.Queue[i].OldestRunOwner != "" {
			t.Fatalf("the oldest run's owner: %q to an admin, %q to its owner", e.OldestRunOwner, view.Queue[i].OldestRunOwner)
		}
	}
	env.CheckInvariants()
}

// The nodes view names the run each node
// holds, its owner and role, to admins.
func TestTheFleetViewNamesTheRunEachNodeHolds(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "a1", false, "board")
	env.Beat("B", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("one", "board")); resp.Status != 201 {
		t.Fatalf("one: %s", resp)
	}
	var fleet struct{ Nodes []store.Node }
	env.Do(apitest.Admin, "GET", "/v1/nodes", nil).Decode(t, &fleet)
	held := 0
	for _, n := range fleet.Nodes {
		switch {
		case n.State == wire.NodeLeased && n.RunID != nil && *n.RunID == "one" && *n.RunOwner == "client:alice" &&
			*n.RunKind == wire.KindRun && *n.Role == "main" && n.LeasedAt != nil:
			held++
		case n.State == wire.NodeIdle && n.RunID == nil && n.Role == nil && n.LeasedAt == nil:
		default:
			t.Fatalf("node %+v", n)
		}
	}
	if held != 1 {
		t.Fatalf("%d nodes hold run one", held)
	}
}

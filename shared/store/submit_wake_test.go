package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// freeWithoutWake frees node's lease by a succeeded report through the store alone, so no
// wake follows it (as when the reporter's function died after its commit), and ends the hold
// the report took for that wake, as its hold's end would.
func freeWithoutWake(t *testing.T, env *apitest.Env, node, runID string) {
	t.Helper()
	ctx := context.Background()
	epoch := env.Epoch(node)
	for _, status := range []string{wire.ReportStarted, wire.ReportSucceeded} {
		p := wire.Report{RunID: runID, StepID: "s1", NodeID: node, BootID: "b1", Epoch: epoch, Status: status}
		if status == wire.ReportSucceeded {
			p.ExitCode = new(int)
		}
		if _, err := env.Store.Report(ctx, p); err != nil {
			t.Fatalf("%s %s: %v", runID, status, err)
		}
	}
	env.Exec(`UPDATE free_nodes SET held_until = NULL WHERE node_id = $1`, node)
}

// A run the submit queued behind an older one of lower priority, onto a free node the older
// run's wake never came for: the submit's own wake starts from the submit's read, with the run
// in it, places the run by queue order, and takes nothing else from the database — no read of
// the queue again, no read of the run behind it (the read listed it).
func TestASubmitsWakeStartsFromItsOwnRead(t *testing.T) {
	t.Parallel()
	var tags pgcount.Tags
	env := apitest.New(t, apitest.Tracer(&tags))
	ctx := context.Background()
	env.Heartbeat("A", "b1", false, "board")
	if r := env.Submit(apitest.NewRun("first", "board")); r.Outcome != store.Placed {
		t.Fatalf("first: %v", r.Outcome)
	}
	low := apitest.NewRun("low", "board")
	low.Priority = 10
	if r := env.Submit(low); r.Outcome != store.Waiting {
		t.Fatalf("low: %v", r.Outcome)
	}
	freeWithoutWake(t, env, "A", "first")

	high := apitest.NewRun("high", "board")
	high.Priority = 90
	res, err := env.Store.Submit(ctx, high)
	if err != nil || res.Outcome != store.Waiting {
		t.Fatalf("high: %v %v; want queued: the submit counts every queued run as ahead", res.Outcome, err)
	}
	mark := tags.Mark()
	woke, err := env.Store.WakeQueued(ctx, res.Wake)
	if err != nil {
		t.Fatal(err)
	}
	if sent := tags.Since(mark); !slices.Equal(sent, []string{"wake: promote"}) {
		t.Fatalf("the wake sent %v; want only its promotion", sent)
	}
	if _, ok := woke.Promotion("high"); !ok || env.State("high") != wire.Running || env.State("low") != wire.Queued {
		t.Fatalf("promoted %v; high %s, low %s", woke.Runs, env.State("high"), env.State("low"))
	}
}

// A submit that found every capable node busy queues its run; a node freed between its read
// and its insert, by a writer whose wake came and went before the run was committed, is found
// by the run's own wake, which reads again when the submit's read cannot place it. The run is
// then answered as the promotion left it: RUNNING on that node, as GET shows it.
func TestAQueuedRunItsOwnWakePromotesIsAnsweredAsPlaced(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	env.Heartbeat("A", "b1", false, "board")
	if r := env.Submit(apitest.NewRun("busy", "board")); r.Outcome != store.Placed {
		t.Fatalf("busy: %v", r.Outcome)
	}
	res, err := env.Store.SubmitThen(ctx, apitest.NewRun("mine", "board"), func() {
		env.Finish("A", "b1", "busy", wire.ReportSucceeded) // its wake finds nothing queued
	})
	if err != nil || res.Outcome != store.Waiting {
		t.Fatalf("mine: %v %v; want queued, the node busy at the read", res.Outcome, err)
	}
	woke, err := env.Store.WakeQueued(ctx, res.Wake)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := woke.Promotion("mine")
	if !ok {
		t.Fatalf("the submit's wake did not place mine: %+v", woke)
	}
	answered := res.Promoted(p)
	stored, err := env.Store.GetRun(ctx, store.RunRef{Name: "mine", Viewer: store.Viewer{Owner: "client:t"}})
	if err != nil {
		t.Fatal(err)
	}
	if answered.Outcome != store.Placed || answered.Run.Assigned["main"] != "A" {
		t.Fatalf("answered %v on %v", answered.Outcome, answered.Run.Assigned)
	}
	a, _ := json.Marshal(answered.Run)
	b, _ := json.Marshal(stored)
	if string(a) != string(b) {
		t.Fatalf("the answer is not the run as stored:\nanswered %s\nstored   %s", a, b)
	}
	if stored.StartedAt == nil || time.Since(*stored.StartedAt) > time.Hour {
		t.Fatalf("started_at %v", stored.StartedAt)
	}
}

package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// busy registers node (labels board) and places a run on it: the fleet's one board is taken.
func busy(env *apitest.Env, node, runID string) {
	env.T.Helper()
	env.Heartbeat(node, "b1", false, "board")
	if r := env.Submit(apitest.NewRun(runID, "board")); r.Run.State != wire.Running {
		env.T.Fatalf("%s: %s", runID, r.Run.State)
	}
}

// finish reports runID's step started and then succeeded from node, through the store, and
// says what the last report did.
func finish(env *apitest.Env, node, runID string) store.ReportResult {
	env.T.Helper()
	var res store.ReportResult
	for _, status := range []string{wire.ReportStarted, wire.ReportSucceeded} {
		var err error
		res, err = env.Store.Report(context.Background(), wire.Report{
			RunID: runID, StepID: "s1", NodeID: node, BootID: "b1", Epoch: env.Epoch(node), Status: status, ExitCode: new(int),
		})
		if err != nil {
			env.T.Fatalf("%s %s: %v", runID, status, err)
		}
	}
	return res
}

// A report that frees the node a queued run waits for holds it: the wakes of others (a
// submit's, the reaper's) pass it by, and the reporter's own wake places the run on it.
func TestAReportHoldsTheNodeTheQueueWaitsFor(t *testing.T) {
	t.Parallel()
	var counter pgcount.Counter
	env := apitest.New(t, apitest.Tracer(&counter))
	busy(env, "A", "r1")
	env.Submit(apitest.NewRun("r2", "board"))
	res := finish(env, "A", "r1")
	if !slices.Equal(res.Held, []string{"A"}) {
		t.Fatalf("held: %v", res.Held)
	}
	if woke := env.Wake(); woke.Promoted != 0 {
		t.Fatalf("another wake placed on the held node: %+v", woke)
	}
	if res.Read == nil {
		t.Fatal("the report did not read the queue for its wake")
	}
	// The wake starts from the report's read: its promotion, with the node's work, is all it
	// sends.
	before := counter.Read()
	woke, err := env.Store.WakeQueued(context.Background(), store.WakeParams{Held: res.Held, Read: res.Read, HandOver: &store.NodeAtBoot{NodeID: "A", BootID: "b1"}})
	if err != nil || woke.Promoted != 1 || woke.HandedOver == nil || woke.HandedOver.Lease.RunID != "r2" || len(woke.HandedOver.Steps) != 1 {
		t.Fatalf("the reporter's wake: %+v %v", woke, err)
	}
	if tx := counter.Read().Since(before).Txs; tx != 1 {
		t.Fatalf("the reporter's wake took %d transactions, want 1", tx)
	}
}

// No hold when the queue does not wait for this node: nothing queued, nothing queued it could
// serve, or another free node of its kind about.
func TestNoHoldWhenTheQueueDoesNotWaitForTheNode(t *testing.T) {
	t.Parallel()
	for name, queue := range map[string]func(env *apitest.Env){
		"empty queue":           func(env *apitest.Env) {},
		"queued for other kind": func(env *apitest.Env) { env.Submit(waiting("r2", "gpu")) },
		"another board free": func(env *apitest.Env) {
			env.Submit(apitest.NewRun("r2", "board"))
			env.Heartbeat("B", "b1", false, "board") // free, and no wake has run since
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t)
			busy(env, "A", "r1")
			queue(env)
			if res := finish(env, "A", "r1"); len(res.Held) != 0 {
				t.Fatalf("held: %v", res.Held)
			}
		})
	}
}

// A held node its reporter's wake cannot use is let go before that wake ends, and the wake
// sweeps again: after it, no hold is left.
func TestAHoldTheWakeCannotUseIsLetGo(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	busy(env, "A", "r1")
	env.Heartbeat("G", "b1", false, "gpu")
	wide := waiting("r2", "board")
	wide.Roles = append(wide.Roles, wire.NewRole{Name: "host", Needs: []string{"gpu"}}, wire.NewRole{Name: "peer", Needs: []string{"board"}})
	env.Submit(wide) // two boards and the GPU: A alone will not do
	res := finish(env, "A", "r1")
	if !slices.Equal(res.Held, []string{"A"}) {
		t.Fatalf("held: %v", res.Held)
	}
	woke, err := env.Store.WakeQueued(context.Background(), store.WakeParams{Held: res.Held, Read: res.Read})
	if err != nil || woke.Promoted != 0 || woke.Sweeps < 2 {
		t.Fatalf("the reporter's wake: %+v %v", woke, err)
	}
	if n := env.Count(`SELECT count(*) FROM free_nodes WHERE held_until IS NOT NULL`); n != 0 {
		t.Fatalf("%d holds left after the wake", n)
	}
	env.Heartbeat("B", "b1", false, "board")
	if woke := env.Wake(); woke.Promoted != 1 {
		t.Fatalf("once a second board came: %+v", woke)
	}
}

// A hold whose wake never came (its Lambda died after the report's commit) ends by itself:
// then any wake places on the node.
func TestAnOrphanedHoldEndsByItself(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	busy(env, "A", "r1")
	env.Submit(apitest.NewRun("r2", "board"))
	if res := finish(env, "A", "r1"); len(res.Held) != 1 {
		t.Fatalf("held: %v", res.Held)
	}
	if woke := env.Wake(); woke.Promoted != 0 {
		t.Fatalf("while held: %+v", woke)
	}
	env.Exec(`UPDATE free_nodes SET held_until = now() - interval '1 millisecond'`) // the hold's time has passed
	if woke := env.Wake(); woke.Promoted != 1 {
		t.Fatalf("after the hold: %+v", woke)
	}
}

// Nodes that finish at once, with the queue longer than the fleet, each go straight to their
// next run: every report's answer hands its node one, the oldest runs in order, and no node
// is left free or held.
func TestConcurrentReportsEachHandTheirNodeItsNextRun(t *testing.T) {
	t.Parallel()
	const nodes, queued = 8, 20
	env := apitest.New(t)
	for i := range nodes {
		busy(env, fmt.Sprintf("n%d", i), fmt.Sprintf("first-%d", i))
	}
	for i := range queued {
		env.Submit(apitest.NewRun(fmt.Sprintf("q%02d", i), "board"))
	}
	for i := range nodes {
		node := fmt.Sprintf("n%d", i)
		if r := env.Report(node, "b1", env.Epoch(node), "first-"+node[1:], "s1", "started"); r.Status != 200 {
			t.Fatal(r)
		}
	}
	var wg sync.WaitGroup
	handed := make([]string, nodes)
	for i := range nodes {
		wg.Go(func() {
			node := fmt.Sprintf("n%d", i)
			resp := env.Report(node, "b1", env.Epoch(node), fmt.Sprintf("first-%d", i), "s1", "succeeded")
			var answer struct {
				NextRun *struct{ Lease store.HeldLease } `json:"next_run"`
			}
			resp.Decode(t, &answer)
			if answer.NextRun != nil {
				handed[i] = answer.NextRun.Lease.RunID
			}
		})
	}
	wg.Wait()
	for i, run := range handed {
		if run == "" {
			t.Errorf("n%d was handed no run: %v", i, handed)
		}
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING' AND run_id < 'q08'`); n != nodes {
		t.Errorf("%d of the %d oldest queued runs running", n, nodes)
	}
	if n := env.Count(`SELECT count(*) FROM free_nodes`); n != 0 {
		t.Errorf("%d nodes left free with runs queued", n)
	}
}

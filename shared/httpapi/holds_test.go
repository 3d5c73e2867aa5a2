package httpapi_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// holdOn is a hold's request: seconds long, on a node that has need.
func holdOn(id string, seconds int, needs ...string) map[string]any {
	return map[string]any{"run_id": id, "needs": needs, "hold_seconds": seconds}
}

// runAnswer is the run of an answer.
func runAnswer(env *apitest.Env, resp apitest.Response) store.Run {
	env.T.Helper()
	var a struct{ Run store.Run }
	resp.Decode(env.T, &a)
	return a.Run
}

// history is the kinds of a run's events, oldest first.
func history(env *apitest.Env, run string) string {
	env.T.Helper()
	var kinds string
	if err := env.Store.Pool().QueryRow(env.T.Context(),
		`SELECT string_agg(kind, ' ' ORDER BY event_id) FROM run_events WHERE run_id = $1`, run).Scan(&kinds); err != nil {
		env.T.Fatal(err)
	}
	return kinds
}

// A hold on the only board: it is placed with its end, the board's agent is handed a lease and
// nothing to run, a run needing the board queues, and the release places that run at once.
func TestAHoldKeepsItsBoardUntilReleased(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	resp := env.Do(alice, "POST", "/v1/runs", holdOn("debug", 3600, "board"))
	h := runAnswer(env, resp)
	if resp.Status != 201 || h.Kind != wire.KindHold || h.State != wire.Running || h.HoldEndsAt == nil ||
		h.HoldSeconds == nil || *h.HoldSeconds != 3600 || len(h.Steps) != 0 || h.Assigned["main"] != "A" {
		t.Fatalf("a hold on a free board: %s", resp)
	}
	if d := h.HoldEndsAt.Sub(*h.StartedAt); d != time.Hour {
		t.Fatalf("the hold ends %s after it started, want 1h", d)
	}
	_, b := env.Beat("A", "b1", false, "board")
	if b.Lease == nil || b.Lease.RunID != "debug" || len(b.Steps) != 0 {
		t.Fatalf("the held board's heartbeat: lease %+v, steps %+v", b.Lease, b.Steps)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("after", "board")); resp.Status != 202 {
		t.Fatalf("a run needing the held board: %s", resp)
	}
	env.Reap()
	if env.State("after") != wire.Queued {
		t.Fatal("a reap placed a run on a held board")
	}
	resp = env.Do(alice, "POST", "/v1/runs/debug/release", nil)
	if r := runAnswer(env, resp); resp.Status != 200 || r.State != wire.Succeeded || r.Reason != nil {
		t.Fatalf("release: %s", resp)
	}
	if env.State("after") != wire.Running || leasedTo(env, "A") != "after" {
		t.Fatalf("after the release: %s on %q", env.State("after"), leasedTo(env, "A"))
	}
	if got := history(env, "debug"); got != "submitted hold_placed hold_released hold_ended" {
		t.Fatalf("the hold's history: %s", got)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/debug/release", nil); resp.Status != 409 || !strings.Contains(string(resp.Body), `"run_not_live"`) {
		t.Fatalf("a second release: %s", resp)
	}
	env.CheckInvariants()
}

// A hold whose time is up ends SUCCEEDED by the reaper, never before, and its board goes to the
// run waiting for it in the same reap.
func TestAHoldEndsWhenItsTimeIsUp(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("debug", 60, "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("after", "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	if sum := env.Reap(); sum.HoldsEnded != 0 || env.State("debug") != wire.Running {
		t.Fatalf("a reap within the hold ended %d", sum.HoldsEnded)
	}
	env.Exec(`UPDATE runs SET hold_ends_at = now() - interval '1 second' WHERE run_id = 'debug'`)
	if sum := env.Reap(); sum.HoldsEnded != 1 || env.State("debug") != wire.Succeeded || env.State("after") != wire.Running {
		t.Fatalf("a reap past the end: %d ended; debug %s, after %s", sum.HoldsEnded, env.State("debug"), env.State("after"))
	}
	if got := history(env, "debug"); got != "submitted hold_placed hold_expiring hold_expired hold_ended" {
		t.Fatalf("the hold's history: %s", got)
	}
	env.CheckInvariants()
}

// A hold naming one node of three identical boards gets that one; a hold queues behind
// another for the same board, and is placed when the first is cancelled.
func TestAHoldNamesItsBoardAndQueuesForIt(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, n := range []string{"A", "B", "C"} {
		env.Beat(n, "b1", false, "board")
	}
	resp := env.Do(alice, "POST", "/v1/runs", holdOn("mine", 600, "board", "node_id=B"))
	if h := runAnswer(env, resp); resp.Status != 201 || h.Assigned["main"] != "B" {
		t.Fatalf("a hold naming B: %s", resp)
	}
	if resp := env.Do(apitest.Client("bob"), "POST", "/v1/runs", holdOn("his", 600, "node_id=B")); resp.Status != 202 {
		t.Fatalf("a second hold on B: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/mine/cancel", nil); resp.Status != 200 {
		t.Fatalf("cancel the hold: %s", resp)
	}
	if got := leasedTo(env, "B"); got != "his" || env.State("mine") != wire.Cancelled {
		t.Fatalf("after the cancel B is leased to %q, mine is %s", got, env.State("mine"))
	}
	env.CheckInvariants()
}

// Two holds racing for one board: one is placed, the other queues.
func TestTwoHoldsRaceForOneBoard(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	statuses := make([]int, 2)
	var wg sync.WaitGroup
	for i, who := range []string{"alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = env.Do(apitest.Client(who), "POST", "/v1/runs", holdOn("h", 600, "board")).Status
		}()
	}
	wg.Wait()
	if !(statuses[0] == 201 && statuses[1] == 202 || statuses[0] == 202 && statuses[1] == 201) {
		t.Fatalf("two holds on one board answered %v, want one 201 and one 202", statuses)
	}
	env.CheckInvariants()
}

// Extends racing never push a hold's end past MAX_HOLD_SECONDS from now, and each moves it
// only later; a queued hold grows in length within the same bound; an ended hold is 409
// run_not_live, a run of another kind 409 not_a_hold, and a bad length a 400 naming seconds.
func TestExtendsNeverPassTheMaximum(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	resp := env.Do(alice, "POST", "/v1/runs", holdOn("long", 3600, "board"))
	before := *runAnswer(env, resp).HoldEndsAt
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := env.Do(alice, "POST", "/v1/runs/long/extend", map[string]any{"seconds": 7200}); resp.Status != 200 {
				t.Errorf("extend: %s", resp)
			}
		}()
	}
	wg.Wait()
	if env.Count(`SELECT count(*) FROM runs WHERE run_id = 'long' AND hold_ends_at <= now() + make_interval(secs => $1)
		AND hold_ends_at > $2`, wire.DefaultMaxHoldSeconds, before) != 1 {
		t.Fatal("twenty extends moved the end past MAX_HOLD_SECONDS from now, or not at all")
	}
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("next", 600, "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	resp = env.Do(alice, "POST", "/v1/runs/next/extend", map[string]any{"seconds": 600})
	if h := runAnswer(env, resp); resp.Status != 200 || *h.HoldSeconds != 1200 || h.HoldEndsAt != nil {
		t.Fatalf("extend a queued hold: %s", resp)
	}
	env.Do(alice, "POST", "/v1/runs/long/release", nil)
	if resp := env.Do(alice, "POST", "/v1/runs/long/extend", map[string]any{"seconds": 60}); resp.Status != 409 || !strings.Contains(string(resp.Body), `"run_not_live"`) {
		t.Fatalf("extend an ended hold: %s", resp)
	}
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("plain", "board"))
	if resp := env.Do(alice, "POST", "/v1/runs/plain/extend", map[string]any{"seconds": 60}); resp.Status != 409 || !strings.Contains(string(resp.Body), `"not_a_hold"`) {
		t.Fatalf("extend a run: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/plain/release", nil); resp.Status != 409 || !strings.Contains(string(resp.Body), `"not_a_hold"`) {
		t.Fatalf("release a run: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/next/extend", map[string]any{"seconds": 0}); resp.Status != 400 || !strings.Contains(string(resp.Body), `"seconds"`) {
		t.Fatalf("extend by 0: %s", resp)
	}
	if resp := env.Do(apitest.Client("bob"), "POST", "/v1/runs/next/extend", map[string]any{"seconds": 60}); resp.Status != 404 {
		t.Fatalf("a stranger's extend: %s", resp)
	}
	env.CheckInvariants()
}

// A hold is a hold: no steps, its length within MAX_HOLD_SECONDS, no timeout, one attempt.
// Each refusal names its field and stores nothing.
func TestAHoldsRequestIsChecked(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"run_id": "a", "needs": []string{"board"}, "hold_seconds": 60, "steps": []map[string]any{{"id": "s"}}}, `"steps"`},
		{map[string]any{"run_id": "b", "needs": []string{"board"}, "hold_seconds": 0}, `"hold_seconds"`},
		{map[string]any{"run_id": "c", "needs": []string{"board"}, "hold_seconds": wire.DefaultMaxHoldSeconds + 1}, `"hold_seconds"`},
		{map[string]any{"run_id": "d", "needs": []string{"board"}, "hold_seconds": 60, "timeout_seconds": 60}, `"timeout_seconds"`},
		{map[string]any{"run_id": "e", "needs": []string{"board"}, "hold_seconds": 60, "max_attempts": 2}, `"max_attempts"`},
		{map[string]any{"run_id": "f", "needs": []string{"board"}, "hold_seconds": "1h"}, `"hold_seconds"`},
	} {
		resp := env.Do(alice, "POST", "/v1/runs", tc.body)
		if resp.Status != 400 || !strings.Contains(string(resp.Body), tc.field) {
			t.Errorf("%v: %s, want 400 at %s", tc.body, resp, tc.field)
		}
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("%d runs stored", n)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("nowhere", 60, "board=none")); resp.Status != 422 {
		t.Fatalf("a hold no node could serve: %s", resp)
	}
}

// A held board's agent restarting does not end the hold: the lease is granted again under the
// new boot, with a new epoch, and the board stays held. A lost node ends it FAILED lease_expired,
// and a hold's loss counts nothing against the node.
func TestAHoldOutlivesARestartNotALoss(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("debug", 600, "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	epoch := env.Epoch("A")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("after", "board"))
	_, b := env.Beat("A", "b2", false, "board")
	if b.Lease == nil || b.Lease.RunID != "debug" || b.Lease.Epoch == epoch || env.State("debug") != wire.Running || env.State("after") != wire.Queued {
		t.Fatalf("after a restart: lease %+v (was epoch %d), debug %s, after %s", b.Lease, epoch, env.State("debug"), env.State("after"))
	}
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
	env.Reap()
	var reason string
	if err := env.Store.Pool().QueryRow(t.Context(), `SELECT reason FROM runs WHERE run_id = 'debug'`).Scan(&reason); err != nil || reason != wire.ReasonLeaseExpired {
		t.Fatalf("a hold whose node was lost: %q %v", reason, err)
	}
	if n := nodeView(env, "A"); n.InfraFailures != 0 || n.Health != wire.HealthHealthy {
		t.Fatalf("a hold's loss counted against the node: %+v", n)
	}
	env.CheckInvariants()
}

// A two-node run that keeps its failed boards: the host's step succeeds and its node is
// released at once; the dut's fails, and when the run settles FAILED its node passes to a debug
// hold in the settling transaction — while wakes run in parallel, with runs queued for that very
// board — and only the hold's release gives it to the queue.
func TestAFailedRunKeepsItsBoardForAPostMortem(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("D", "b1", false, "board")
	env.Beat("H", "b1", false, "host")
	run := map[string]any{"run_id": "flash", "keep_on_failure_seconds": 900,
		"roles": map[string]any{"dut": map[string]any{"needs": []string{"board"}}, "host": map[string]any{"needs": []string{"host"}}},
		"steps": []map[string]any{{"id": "serve", "role": "host"}, {"id": "flash", "role": "dut"}}}
	if resp := env.Do(alice, "POST", "/v1/runs", run); resp.Status != 201 {
		t.Fatal(resp)
	}
	for _, id := range []string{"q1", "q2", "q3"} {
		if resp := env.Do(apitest.Client("bob"), "POST", "/v1/runs", oneNodeRun(id, "board")); resp.Status != 202 {
			t.Fatal(resp)
		}
	}
	env.Finish("H", "b1", "flash", wire.ReportSucceeded)
	if leasedTo(env, "H") != "" {
		t.Fatalf("the host's node is still leased to %q after its step succeeded", leasedTo(env, "H"))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					if _, err := env.Store.WakeQueued(t.Context(), store.WakeParams{}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	env.Finish("D", "b1", "flash", wire.ReportFailed)
	close(stop)
	wg.Wait()
	resp := env.Do(alice, "GET", "/v1/runs/flash", nil)
	r := runAnswer(env, resp)
	if r.State != wire.Failed || r.DebugHold == nil || *r.KeepOnFailureSeconds != 900 {
		t.Fatalf("the failed run: %s", resp)
	}
	hold := *r.DebugHold
	resp = env.Do(alice, "GET", "/v1/runs/"+hold, nil)
	h := runAnswer(env, resp)
	if h.Kind != wire.KindHold || h.State != wire.Running || h.DebugOf == nil || *h.DebugOf != "flash" || h.Assigned["dut"] != "D" ||
		h.HoldEndsAt == nil || !wire.IDPattern.MatchString(hold) {
		t.Fatalf("the debug hold: %s", resp)
	}
	if leasedTo(env, "D") != hold {
		t.Fatalf("D is leased to %q, not the debug hold", leasedTo(env, "D"))
	}
	if got := history(env, hold); got != "submitted hold_placed" {
		t.Fatalf("the debug hold's history: %s", got)
	}
	// D's history: the failed run's lease, then the hold's, nothing between.
	var lines string
	if err := env.Store.Pool().QueryRow(t.Context(), `SELECT string_agg(to_state || '@' || run_id, ' ' ORDER BY event_id)
		FROM node_history WHERE node_id = 'D' AND kind = 'lease'`).Scan(&lines); err != nil {
		t.Fatal(err)
	}
	if want := "leased@flash released@flash leased@" + hold; lines != want {
		t.Fatalf("D's leases:\n got %s\nwant %s", lines, want)
	}
	for _, q := range []string{"q1", "q2", "q3"} {
		if env.State(q) != wire.Queued {
			t.Fatalf("%s took the kept board: %s", q, env.State(q))
		}
	}
	if resp := env.Do(alice, "POST", "/v1/runs/"+hold+"/release", nil); resp.Status != 200 {
		t.Fatal(resp)
	}
	if env.State("q1") != wire.Running || leasedTo(env, "D") != "q1" {
		t.Fatalf("after the debug hold's release: q1 %s, D leased to %q", env.State("q1"), leasedTo(env, "D"))
	}
	env.CheckInvariants()
}

// keep_on_failure_seconds is a run's, within MAX_HOLD_SECONDS; a run that succeeds keeps nothing.
func TestKeepOnFailureIsChecked(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	for _, tc := range []map[string]any{
		{"run_id": "a", "needs": []string{"board"}, "hold_seconds": 60, "keep_on_failure_seconds": 60},
		{"run_id": "b", "needs": []string{"board"}, "steps": []map[string]any{{"id": "s"}}, "keep_on_failure_seconds": wire.DefaultMaxHoldSeconds + 1},
		{"run_id": "c", "needs": []string{"board"}, "steps": []map[string]any{{"id": "s"}}, "keep_on_failure_seconds": 0},
	} {
		if resp := env.Do(alice, "POST", "/v1/runs", tc); resp.Status != 400 || !strings.Contains(string(resp.Body), `"keep_on_failure_seconds"`) {
			t.Errorf("%v: %s", tc, resp)
		}
	}
	ok := map[string]any{"run_id": "ok", "needs": []string{"board"}, "steps": []map[string]any{{"id": "s"}}, "keep_on_failure_seconds": 60}
	if resp := env.Do(alice, "POST", "/v1/runs", ok); resp.Status != 201 {
		t.Fatal(resp)
	}
	env.Finish("A", "b1", "ok", wire.ReportSucceeded)
	if r := runAnswer(env, env.Do(alice, "GET", "/v1/runs/ok", nil)); r.State != wire.Succeeded || r.DebugHold != nil || leasedTo(env, "A") != "" {
		t.Fatalf("a run that succeeded: %+v, A leased to %q", r, leasedTo(env, "A"))
	}
}

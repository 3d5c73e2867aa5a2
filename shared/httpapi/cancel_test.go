package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")

	// A run on A with one step running; a run on B; one queued.
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("running", "board", "s1", "s2"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("forced", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("queued", "board"))
	onA := getRun(t, env, "running").Assigned["main"]
	e := env.Epoch(onA)
	env.Report(onA, "boot-1", e, "running", "s1", "started")

	if resp := env.Do(alice, "POST", "/v1/runs/queued/cancel", map[string]any{"reason": "changed my mind"}); resp.Status != 200 ||
		getRun(t, env, "queued").State != wire.Cancelled {
		t.Fatalf("cancel queued: %s", resp)
	}

	resp := env.Do(alice, "POST", "/v1/runs/running/cancel", map[string]any{"reason": "stop"})
	got := getRun(t, env, "running")
	if resp.Status != 202 || got.State != wire.Running || got.CancelRequestedAt == nil || got.Steps[1].State != wire.Cancelled {
		t.Fatalf("cancel running: %s", resp)
	}
	first := *got.CancelRequestedAt
	env.Do(alice, "POST", "/v1/runs/running/cancel", nil)
	if again := getRun(t, env, "running"); !again.CancelRequestedAt.Equal(first) || *again.CancelReason != "stop" {
		t.Fatalf("the first cancel's time and reason are kept: %v %v", again.CancelRequestedAt, again.CancelReason)
	}
	if _, beat := env.Beat(onA, "boot-1", false, "board"); len(beat.Steps) != 1 || !beat.Steps[0].Cancel {
		t.Fatalf("the node sees cancel: %+v", beat.Steps)
	}
	if r := env.Report(onA, "boot-1", e, "running", "s1", "cancelled"); r.Status != 200 {
		t.Fatalf("acknowledge: %s", r)
	}
	if got := getRun(t, env, "running"); got.State != wire.Cancelled || *got.Reason != wire.ReasonCancelled {
		t.Fatalf("after the acknowledgement: %s", got.State)
	}

	if resp := env.Do(alice, "POST", "/v1/runs/forced/cancel", map[string]any{"force": true}); resp.Status != 403 {
		t.Fatalf("a client forcing: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "POST", "/v1/runs/forced/cancel", map[string]any{"force": true}); resp.Status != 200 ||
		getRun(t, env, "forced").State != wire.Cancelled {
		t.Fatalf("force: %s", resp)
	}

	resp = env.Do(alice, "POST", "/v1/runs/running/cancel", nil)
	if resp.Status != 409 || !strings.Contains(string(resp.Body), "run_not_live") || !strings.Contains(string(resp.Body), `"CANCELLED"`) {
		t.Fatalf("cancel a finished run: %s", resp)
	}
	if resp := env.Do(apitest.Client("bob"), "POST", "/v1/runs/running/cancel", nil); resp.Status != 404 {
		t.Fatalf("cancel somebody else's run: %s", resp)
	}
	if n := env.Count(`SELECT count(*) FROM leases`); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	env.CheckInvariants()
}

// After a forced cancel every report of the node is 409, an acknowledging `cancelled` too: the
// system ended its step, the node did not report it, so it is no repeat of a report. (The
// system's end clears the step's epoch: kept from its `started`, it would make the `cancelled`
// pass for a repeat, 200.) A node's own acknowledgement, repeated, stays 200.
func TestReportsAfterAForcedCancelAreStale(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("forced", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("acked", "board"))
	for _, run := range []string{"forced", "acked"} {
		node := getRun(t, env, run).Assigned["main"]
		epoch := env.Epoch(node)
		env.Report(node, "boot-1", epoch, run, "s1", "started")
		if run == "forced" {
			if resp := env.Do(apitest.Admin, "POST", "/v1/runs/forced/cancel", map[string]any{"force": true}); resp.Status != 200 {
				t.Fatalf("force: %s", resp)
			}
			for _, status := range []string{"cancelled", "succeeded", "failed"} {
				if r := env.Report(node, "boot-1", epoch, run, "s1", status); r.Status != 409 || !strings.Contains(string(r.Body), "stale_assignment") {
					t.Errorf("%s after a forced cancel: %s", status, r)
				}
			}
			continue
		}
		env.Do(alice, "POST", "/v1/runs/acked/cancel", nil)
		for range 2 {
			if r := env.Report(node, "boot-1", epoch, run, "s1", "cancelled"); r.Status != 200 {
				t.Errorf("the node's own acknowledgement: %s", r)
			}
		}
	}
	env.CheckInvariants()
}

// 20 goroutines send cancel and the final result of the same run at once: exactly one final
// state, never CANCELLED with a success recorded after it, no lease left.
func TestCancelRacesTheFinalResult(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	outcomes := map[string]int{}
	t.Cleanup(func() { t.Logf("outcomes: %v", outcomes) })
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t, apitest.PoolSize(24))
			env.Beat("A", "boot-1", false, "board")
			env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
			e := env.Epoch("A")
			env.Report("A", "boot-1", e, "r", "s1", "started")
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var resp apitest.Response
					switch g % 4 {
					case 0:
						resp = env.Do(apitest.Admin, "POST", "/v1/runs/r/cancel", map[string]any{"force": true})
					case 2:
						resp = env.Do(alice, "POST", "/v1/runs/r/cancel", nil)
					default:
						resp = env.Report("A", "boot-1", e, "r", "s1", "succeeded")
					}
					if resp.Status >= 500 {
						t.Errorf("%s", resp)
					}
				}()
			}
			close(start)
			wg.Wait()
			got := getRun(t, env, "r")
			if !wire.Final(got.State) {
				// Only cancels won: the run waits for the node to acknowledge.
				if got.State != wire.Running || got.CancelRequestedAt == nil {
					t.Fatalf("state %s", got.State)
				}
				return
			}
			if n := env.Count(`SELECT count(*) FROM run_events WHERE run_id = 'r' AND to_state IN ('SUCCEEDED','FAILED','CANCELLED')`); n != 1 {
				t.Fatalf("%d final events", n)
			}
			mu.Lock()
			outcomes[got.State]++
			mu.Unlock()
			if got.State == wire.Cancelled && got.Steps[0].State == wire.Succeeded {
				t.Fatal("a success was recorded on a cancelled run")
			}
			if got.State == wire.Succeeded && got.Steps[0].State != wire.Succeeded {
				t.Fatalf("SUCCEEDED with its step %s", got.Steps[0].State)
			}
			if n := env.Count(`SELECT count(*) FROM leases`); n != 0 {
				t.Fatalf("%d leases left", n)
			}
			env.CheckInvariants()
		})
	}
}

// A RUNNING run with no step started has nothing to acknowledge the cancel: it is CANCELLED at
// once (200), with its reason, and its node is free for the next run.
func TestCancelOfARunWithNothingStarted(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("idle", "board", "s1", "s2"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("next", "board"))
	resp := env.Do(alice, "POST", "/v1/runs/idle/cancel", map[string]any{"reason": "not needed"})
	got := getRun(t, env, "idle")
	if resp.Status != 200 || got.State != wire.Cancelled || *got.CancelReason != "not needed" ||
		got.Steps[0].State != wire.Cancelled || got.Steps[1].State != wire.Cancelled {
		t.Fatalf("cancel of a run with nothing started: %s", resp)
	}
	if getRun(t, env, "next").State != wire.Running {
		t.Fatal("the freed node was not handed to the queued run")
	}
	env.CheckInvariants()
}

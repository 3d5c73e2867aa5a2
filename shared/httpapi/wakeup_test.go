package httpapi_test

// Every write that can make room for a queued run wakes the queue before its handler returns,
// however it races: at quiescence a wake finds nothing to place, and the reaper's stranded-run
// detector finds nothing either.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/wire"
)

// Several heartbeats carrying new boot ids for one node at once. The first restart releases
// the lease and its wake places the queued run on the node under the boot it read; a second
// restart changing the boot at that moment makes that promotion fail at COMMIT. Someone must
// still place the run: the heartbeat that changed the boot wakes, and the failed promotion
// sweeps again.
func TestConcurrentRestartsLeaveNoRunStranded(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(16))
	for i := range 12 {
		node, label := fmt.Sprintf("n%02d", i), fmt.Sprintf("slot=%d", i)
		env.Beat(node, "boot-0", false, label)
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun(fmt.Sprintf("held-%d", i), label)); resp.Status != 201 {
			t.Fatalf("held-%d: %s", i, resp)
		}
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun(fmt.Sprintf("next-%d", i), label)); resp.Status != 202 {
			t.Fatalf("next-%d: %s", i, resp)
		}
		var wg sync.WaitGroup
		for b := range 2 + i%2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, _ := env.Beat(node, fmt.Sprintf("boot-%d", b+1), false, label); resp.Status != 200 {
					t.Errorf("restart of %s: %s", node, resp)
				}
			}()
		}
		wg.Wait()
		if n := env.Wake().Promoted; n != 0 {
			t.Fatalf("after %d concurrent restarts of %s had returned, a wake still placed %d run(s): a lost wakeup", 2+i%2, node, n)
		}
	}
	env.CheckInvariants()
}

// queueBehindAStarvingRun sets up the case: board B1 is free, board B2 is held; "wide" wants
// both boards and has waited past STARVATION_SECONDS, so it keeps B1 from younger runs; the
// younger "narrow" wants one board and waits beside the free B1. With usb, wide's second role
// also needs usb, which only G1 has, and G1 is draining: in the fleet, never available.
func queueBehindAStarvingRun(t *testing.T, usb bool) *apitest.Env {
	t.Helper()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Starvation = time.Hour }))
	env.Beat("B2", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("hold", "board")); resp.Status != 201 {
		t.Fatalf("hold: %s", resp)
	}
	env.Beat("B1", "b1", false, "board")
	second := []string{"board"}
	if usb {
		env.Beat("G1", "b1", true, "board", "usb")
		second = append(second, "usb")
	}
	wide := map[string]any{
		"run_id": "wide",
		"roles":  map[string]any{"a": map[string]any{"needs": []string{"board"}}, "b": map[string]any{"needs": second}},
		"steps":  []map[string]any{{"id": "sa", "role": "a"}, {"id": "sb", "role": "b"}},
	}
	if resp := env.Do(alice, "POST", "/v1/runs", wide); resp.Status != 202 {
		t.Fatalf("wide: %s", resp)
	}
	env.Exec(`UPDATE runs SET created_at = now() - interval '2 hours' WHERE run_id = 'wide'`)
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("narrow", "board")); resp.Status != 202 {
		t.Fatalf("narrow went past the starving wide run: %s", resp)
	}
	return env
}

// A starving run that leaves the queue — cancelled, timed out in the queue, failed for want of
// a capable node — frees the nodes its protection held, and the write that took it out wakes
// the queue for them.
func TestAStarvingRunLeavingTheQueueFreesWhatItHeld(t *testing.T) {
	t.Parallel()
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		env := queueBehindAStarvingRun(t, false)
		if resp := env.Do(alice, "POST", "/v1/runs/wide/cancel", nil); resp.Status != 200 {
			t.Fatalf("cancel: %s", resp)
		}
		if env.State("narrow") != wire.Running {
			t.Fatalf("narrow is %s beside the free B1 after the run holding B1 back was cancelled", env.State("narrow"))
		}
	})
	t.Run("queue timeout", func(t *testing.T) {
		t.Parallel()
		env := queueBehindAStarvingRun(t, false)
		env.Exec(`UPDATE runs SET deadline_at = now() - interval '1 second' WHERE run_id = 'wide'`)
		sum := env.Reap()
		if sum.QueueTimedOut != 1 || env.State("narrow") != wire.Running || sum.Promoted != 1 || sum.Stranded != 0 {
			t.Fatalf("reap %+v; narrow %s: the timed-out run's nodes must be woken for, not found stranded", sum, env.State("narrow"))
		}
	})
	t.Run("no capable node", func(t *testing.T) {
		t.Parallel()
		env := queueBehindAStarvingRun(t, true)
		if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/G1", nil); resp.Status != 200 {
			t.Fatalf("remove G1: %s", resp)
		}
		if env.State("wide") != wire.Failed || env.State("narrow") != wire.Running {
			t.Fatalf("wide %s, narrow %s: the unservable starving run failed but its board was left idle", env.State("wide"), env.State("narrow"))
		}
	})
	t.Run("no capable node, by the reaper", func(t *testing.T) {
		t.Parallel()
		env := queueBehindAStarvingRun(t, true)
		env.Exec(`UPDATE nodes SET advert_expires_at = now() - interval '1 day', last_seen_at = now() - interval '400 days' WHERE node_id = 'G1'`)
		sum := env.Reap()
		if sum.Retired != 1 || sum.Unservable != 1 || env.State("narrow") != wire.Running || sum.Stranded != 0 {
			t.Fatalf("reap %+v; narrow %s", sum, env.State("narrow"))
		}
	})
}

package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// An expired lease is reaped: its run is requeued (attempts left) or FAILED lease_expired, and
// a queued run waiting for that node is promoted by the same invocation.
func TestReapExpiredLease(t *testing.T) {
	t.Parallel()
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprint("max_attempts=", attempts), func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t)
			env.Heartbeat("A", "b1", false, "board")
			held := apitest.NewRun("held", "board")
			held.MaxAttempts = attempts
			env.Submit(held)
			env.Submit(apitest.NewRun("waiting", "board"))
			env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second'`)
			sum := env.Reap()
			if sum.Expired != 1 || sum.Promoted != 1 || sum.Stranded != 0 {
				t.Fatalf("summary %+v", sum)
			}
			switch attempts {
			case 1:
				if env.State("held") != wire.Failed || env.State("waiting") != wire.Running {
					t.Fatalf("held %s, waiting %s", env.State("held"), env.State("waiting"))
				}
				if n := env.Count(`SELECT count(*) FROM runs WHERE run_id = 'held' AND reason = 'lease_expired'`); n != 1 {
					t.Fatal("held is not FAILED lease_expired")
				}
			case 2:
				// Requeued in its original place, ahead of the run that came later.
				if env.State("held") != wire.Running || env.State("waiting") != wire.Queued ||
					env.Count(`SELECT attempt FROM runs WHERE run_id = 'held'`) != 2 {
					t.Fatalf("held %s, waiting %s", env.State("held"), env.State("waiting"))
				}
			}
			env.CheckInvariants()
		})
	}
}

// A lease renewed between the reaper's read and its write is not reaped: the write re-checks
// the epoch and the expiry itself.
func TestReapLosesToARenewal(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("r", "board"))
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second'`)
	epoch := env.Count(`SELECT epoch FROM leases WHERE node_id = 'A' AND expires_at < now()`) // the reaper's read
	env.Heartbeat("A", "b1", false, "board")                                                  // the renewal
	lost, err := env.Store.ReapLease(context.Background(), "A", int64(epoch))                 // the reaper's write
	if err != nil || lost {
		t.Fatalf("a renewed lease was reaped (%v)", err)
	}
	if env.State("r") != wire.Running || env.Epoch("A") != int64(epoch) {
		t.Fatalf("r %s, epoch %d", env.State("r"), env.Epoch("A"))
	}
}

func TestReapDeadlines(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Heartbeat("B", "b1", false, "board")
	timed := apitest.NewRun("timed", "board")
	seconds := 60
	timed.TimeoutSeconds = &seconds
	env.Submit(timed)
	env.Submit(apitest.NewRun("cancelling", "board"))
	queued := apitest.NewRun("queued", "board")
	queued.QueueTimeoutSeconds = &seconds
	env.Submit(queued)
	// The cancelling run's step is running, so its cancel waits for the node's acknowledgement.
	node := ""
	_ = env.Store.Pool().QueryRow(context.Background(), `SELECT node_id FROM leases WHERE run_id = 'cancelling'`).Scan(&node)
	if r := env.Report(node, "b1", env.Epoch(node), "cancelling", "s1", "started"); r.Status != 200 {
		t.Fatalf("start: %s", r)
	}
	if _, err := env.Store.Cancel(context.Background(), store.CancelParams{Run: store.RunRef{Name: "cancelling", Viewer: store.Viewer{Admin: true}}}); err != nil {
		t.Fatal(err)
	}
	// Nothing is due yet.
	if sum := env.Reap(); sum.Cancelled+sum.TimedOut+sum.QueueTimedOut != 0 {
		t.Fatalf("nothing due, yet %+v", sum)
	}
	// Time passes — written, never slept.
	env.Exec(`UPDATE runs SET deadline_at = now() - interval '1 second' WHERE run_id IN ('timed', 'queued')`)
	env.Exec(`UPDATE runs SET cancel_requested_at = now() - interval '61 seconds' WHERE run_id = 'cancelling'`)
	sum := env.Reap()
	if sum.Cancelled != 1 || sum.TimedOut != 1 || sum.QueueTimedOut != 1 {
		t.Fatalf("summary %+v", sum)
	}
	for run, want := range map[string]string{"timed": "timeout", "queued": "queue_timeout", "cancelling": "cancelled"} {
		if n := env.Count(`SELECT count(*) FROM runs WHERE run_id = $1 AND reason = $2 AND finished_at IS NOT NULL`, run, want); n != 1 {
			t.Errorf("%s is not ended with %s", run, want)
		}
	}
	env.CheckInvariants()
}

// A node silent past NODE_RETIRE_AFTER leaves the fleet, and a queued run only it could serve
// fails no_capable_node.
func TestReapRetiresSilentNodes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("gpu-1", "b1", false, "gpu")
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("hold", "gpu"))
	env.Submit(apitest.NewRun("needs-gpu", "gpu"))
	// gpu-1 goes silent: its lease expires, and a day later it is retired.
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 hour'`)
	env.Exec(`UPDATE nodes SET last_seen_at = now() - interval '25 hours', advert_expires_at = now() - interval '25 hours' WHERE node_id = 'gpu-1'`)
	sum := env.Reap()
	if sum.Expired != 1 || sum.Retired != 1 || sum.Unservable != 1 {
		t.Fatalf("summary %+v", sum)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE run_id = 'needs-gpu' AND state = 'FAILED' AND reason = 'no_capable_node'`); n != 1 {
		t.Fatal("the run only gpu-1 could serve did not fail")
	}
	if n := env.Count(`SELECT count(*) FROM nodes`); n != 1 {
		t.Fatalf("%d nodes left", n)
	}
	env.CheckInvariants()
}

// A queued run next to a free capable node with no event — a lost wakeup made on purpose — is
// promoted by the next reap and counted as stranded. With nothing stranded and nothing
// released, the reap does not walk the queue.
func TestReapFindsStrandedRuns(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	r := apitest.NewRun("stranded", "board")
	r.WaitForCapacity = true
	env.Submit(r)
	env.Heartbeat("A", "b1", false, "board") // the store alone: no handler, so no wake
	if env.State("stranded") != wire.Queued {
		t.Fatal("setup: the run was placed")
	}
	sum := env.Reap()
	if sum.Stranded != 1 || sum.Promoted != 0 || env.State("stranded") != wire.Running {
		t.Fatalf("summary %+v, state %s", sum, env.State("stranded"))
	}
	r.RunID = "waiting"
	env.Submit(r) // A is busy: it waits
	if sum := env.Reap(); sum.Stranded != 0 || sum.Walked != 0 {
		t.Fatalf("nothing free, nothing released, yet %+v", sum)
	}
}

// A reap near its invocation's deadline stops cleanly and says so; the next one goes on.
func TestReapStopsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("r", "board"))
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second'`)
	// Already inside the margin the reaper leaves, yet with that margin for the wake it still
	// runs: the whole margin, since less is not always enough for that one query on a loaded
	// machine.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(store.ReapMargin))
	defer cancel()
	sum, err := env.Store.Reap(ctx, store.ReapParams{})
	if err != nil || !sum.Unfinished || sum.Expired != 0 {
		t.Fatalf("near the deadline: %+v, %v", sum, err)
	}
	if sum := env.Reap(); sum.Expired != 1 || sum.Unfinished {
		t.Fatalf("the next reap: %+v", sum)
	}
}

// seedExpired writes n nodes, each leased by its own RUNNING run, every lease expired.
func seedExpired(t *testing.T, env *apitest.Env, n int) {
	t.Helper()
	env.Exec(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'n' || i, '{board}', 'b1', now() + interval '1 hour' FROM generate_series(1, $1) i`, n)
	env.Exec(`INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, started_at)
		SELECT 'r' || i, 'r' || i, 'client:t', 'RUNNING', '\x00', '[["board"]]', 1, 1, now() FROM generate_series(1, $1) i`, n)
	env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs, node_id) SELECT 'r' || i, 'main', 0, '{board}', 'n' || i FROM generate_series(1, $1) i`, n)
	env.Exec(`INSERT INTO steps (run_id, step_id, role, ordinal) SELECT 'r' || i, 's1', 'main', 0 FROM generate_series(1, $1) i`, n)
	env.Exec(`INSERT INTO run_events (run_id, attempt, kind, to_state) SELECT 'r' || i, 1, 'submitted', 'RUNNING' FROM generate_series(1, $1) i`, n)
	env.Exec(`INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
		SELECT 'n' || i, 'r' || i, 'main', 'b1', now() - interval '1 second' FROM generate_series(1, $1) i`, n)
}

// Four reapers at once over the same 1,000 expired leases: each lease reaped once, each run
// moved once, one small transaction per lease, every invariant holds.
func TestConcurrentReapers(t *testing.T) {
	t.Parallel()
	var counter pgcount.Counter
	env := apitest.New(t, apitest.PoolSize(8), apitest.Tracer(&counter))
	seedExpired(t, env, 1000)
	before := counter.Read()
	sums := make([]store.ReapSummary, 4)
	var wg sync.WaitGroup
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := env.Store.Reap(context.Background(), store.ReapParams{})
			if err != nil {
				t.Errorf("reaper %d: %v", i, err)
			}
			sums[i] = sum
		}()
	}
	wg.Wait()
	expired := 0
	for _, s := range sums {
		expired += s.Expired
	}
	if expired != 1000 {
		t.Fatalf("leases reaped %d times in all over 1000 leases: %+v", expired, sums)
	}
	if txs := counter.Read().Since(before).Txs; txs < 1000 {
		t.Fatalf("%d transactions for 1000 leases: the sweep batched leases into big transactions", txs)
	}
	if n := env.Count(`SELECT count(*) FROM leases`); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	if n := env.Count(`SELECT count(*) FROM (SELECT run_id FROM run_events WHERE kind = 'node_lost' GROUP BY run_id HAVING count(*) <> 1) x`); n != 0 {
		t.Fatalf("%d runs moved other than once", n)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'FAILED' AND reason = 'lease_expired'`); n != 1000 {
		t.Fatalf("%d runs failed lease_expired", n)
	}
	env.CheckInvariants()
}

package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// A writer that waits for a run's lock must decide from the run as it is once it holds the
// lock, not as it was when it started waiting: a cancel queued behind the report that finishes
// a run's last running step would otherwise read the steps from before that report, and leave
// the run RUNNING with every step final and no lease.
func TestWriterDecidesFromTheRunAsLocked(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(6))
	ctx := context.Background()
	env.Heartbeat("A", "b1", false, "dut")
	env.Heartbeat("B", "b1", false, "host")
	pair := apitest.NewRun("pair")
	pair.Roles = []wire.NewRole{{Name: "dut", Needs: []string{"dut"}}, {Name: "host", Needs: []string{"host"}}}
	pair.Steps = []wire.NewStep{
		{ID: "flash", Role: "host", After: []string{}, Spec: []byte(`{}`)},
		{ID: "test", Role: "dut", After: []string{"flash"}, Spec: []byte(`{}`)},
	}
	if res := env.Submit(pair); res.Run.State != wire.Running {
		t.Fatalf("pair: %s", res.Run.State)
	}
	epoch := env.Epoch("B")
	if resp := env.Report("B", "b1", epoch, "pair", "flash", "started"); resp.Status != 200 {
		t.Fatal(resp)
	}
	// flash succeeds; while that report holds the run, a cancel queues up behind it.
	errs := make(chan error, 1)
	err := env.Store.ReportHolding(ctx, wire.Report{RunID: "pair", StepID: "flash", NodeID: "B", BootID: "b1",
		Epoch: epoch, Status: wire.ReportSucceeded}, func() {
		go func() {
			_, err := env.Store.Cancel(ctx, store.CancelParams{Run: store.RunRef{Name: "pair", Viewer: store.Viewer{Admin: true}}})
			errs <- err
		}()
		waitForLockWaiter(t, env, errs)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("cancel: %v", err)
	}
	// When the cancel held the run, flash had succeeded and test had not started: nothing was
	// running, so the cancel settles the run at once.
	if state := env.State("pair"); state != wire.Cancelled {
		t.Fatalf("pair is %s; the cancel decided from the run as it was before it held the lock", state)
	}
	env.CheckInvariants()
}

// waitForLockWaiter returns once some backend of this database waits on a lock — the state the
// test needs, observed, not waited for by the clock. The deadline only turns a writer that
// never queues into a failure instead of a hang. A count of polls would be no bound at all: a
// loaded machine can run through any count before the cancel has its connection.
func waitForLockWaiter(t *testing.T, env *apitest.Env, writer <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// Asked as the application role, the writers' own: pg_stat_activity hides another
		// role's waits.
		var waiting int
		if err := env.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case err := <-writer:
			t.Fatalf("the writer finished without waiting for the run's lock: %v", err)
		default:
		}
	}
	t.Fatal("no writer waited for the run's lock within 30 s")
}

// A report's write re-checks in its own WHERE the step state and the lease it was decided
// from (I7): should the lease change under a decided report, it writes nothing at all.
func TestReportWriteRechecksItsLease(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("r", "board"))
	epoch := env.Epoch("A")
	for _, status := range []string{wire.ReportStarted, wire.ReportSucceeded} {
		if status == wire.ReportSucceeded {
			if resp := env.Report("A", "b1", epoch, "r", "s1", "started"); resp.Status != 200 {
				t.Fatal(resp)
			}
		}
		events := env.Count(`SELECT count(*) FROM run_events`)
		_, err := env.Store.ReportAfter(context.Background(), wire.Report{RunID: "r", StepID: "s1", NodeID: "A",
			BootID: "b1", Epoch: epoch, Status: status}, `UPDATE leases SET epoch = epoch + 1000000`)
		if !errors.Is(err, store.ErrStaleAssignment) {
			t.Fatalf("%s under a lease that changed after the decision: %v", status, err)
		}
		env.Exec(`UPDATE leases SET epoch = epoch - 1000000`)
		want := map[string]string{wire.ReportStarted: wire.Pending, wire.ReportSucceeded: wire.Running}[status]
		if n := env.Count(`SELECT count(*) FROM steps WHERE step_id = 's1' AND state = $1`, want); n != 1 ||
			env.State("r") != wire.Running || env.Count(`SELECT count(*) FROM leases`) != 1 ||
			env.Count(`SELECT count(*) FROM run_events`) != events {
			t.Fatalf("%s refused, yet something was written", status)
		}
	}
	env.CheckInvariants()
}

// A writer that may not act on a queued run does not lock it. The wake takes a locked queued
// run for one being promoted and places the run behind it, so a stranger's cancel (404) or a
// node's late report on a requeued run (409), each holding the older run's lock for nothing,
// let a younger run of the same needs overtake it.
func TestOnlyAWriterThatActsLocksAQueuedRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, node, owner string
		want              error
	}{
		{"a stranger's cancel", "", "client:mallory", store.ErrNotFound},
		{"a late report", "A", "", store.ErrStaleAssignment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t, apitest.PoolSize(4))
			env.Heartbeat("A", "b1", false, "board")
			older := apitest.NewRun("older", "board")
			older.MaxAttempts = 2
			env.Submit(older)
			env.Submit(apitest.NewRun("younger", "board"))
			env.Heartbeat("A", "b2", true, "board")  // A restarts, draining: older is requeued ahead
			env.Heartbeat("B", "b1", false, "board") // a free board, and no wake yet
			if env.State("older") != wire.Queued || env.State("younger") != wire.Queued {
				t.Fatalf("older %s, younger %s", env.State("older"), env.State("younger"))
			}
			err := env.Store.LockHolding(context.Background(), "older", tc.node, tc.owner, func() { env.Wake() })
			if env.State("older") != wire.Running || env.State("younger") != wire.Queued {
				t.Fatalf("younger overtook older while %s held it: older %s, younger %s",
					tc.name, env.State("older"), env.State("younger"))
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("the writer's answer: %v, want %v", err, tc.want)
			}
			env.CheckInvariants()
		})
	}
}

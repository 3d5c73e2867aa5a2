package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// health is a node's health as the database holds it.
type health struct {
	state, reason, by string
	failures          int
}

func nodeHealth(env *apitest.Env, node string) health {
	env.T.Helper()
	var h health
	err := env.Store.Pool().QueryRow(context.Background(), `SELECT health, coalesce(health_reason, ''),
		coalesce(quarantined_by, ''), infra_failures FROM nodes WHERE node_id = $1`, node).Scan(&h.state, &h.reason, &h.by, &h.failures)
	if err != nil {
		env.T.Fatalf("health of %s: %v", node, err)
	}
	return h
}

// fail runs runID's one step on node to a failed report of the failure given ("" says none).
func fail(env *apitest.Env, node, boot, runID, failure string) {
	env.T.Helper()
	epoch := env.Epoch(node)
	if r := env.Report(node, boot, epoch, runID, "s1", wire.ReportStarted); r.Status != 200 {
		env.T.Fatalf("%s started: %s", runID, r)
	}
	report := map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": "failed", "exit_code": 3,
		"message": "the board did not answer"}
	if failure != "" {
		report["failure"] = failure
	}
	if r := env.Do(apitest.Node(node), "POST", "/v1/runs/"+runID+"/steps/s1/result", report); r.Status != 200 {
		env.T.Fatalf("%s failed: %s", runID, r)
	}
}

func place(env *apitest.Env, runID string, needs ...string) {
	env.T.Helper()
	if res := env.Submit(apitest.NewRun(runID, needs...)); res.Run.State != wire.Running {
		env.T.Fatalf("%s: %s, not placed", runID, res.Run.State)
	}
}

// Three infrastructure failures in a row quarantine the node, by the system, with a reason
// naming the count and the last failure; the next run that only it could serve queues — it is
// not refused — and a quarantined node's history says how it got there.
func TestInfraFailuresInARowQuarantineTheNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	place(env, "r1", "board")
	fail(env, "A", "b1", "r1", wire.FailureInfra)
	if h := nodeHealth(env, "A"); h.state != wire.HealthSuspect || h.failures != 1 || h.by != "" {
		t.Fatalf("after one infra failure: %+v, want suspect, 1", h)
	}
	place(env, "r2", "board") // a suspect node still takes work
	fail(env, "A", "b1", "r2", wire.FailureInfra)
	place(env, "r3", "board")
	fail(env, "A", "b1", "r3", wire.FailureInfra)
	h := nodeHealth(env, "A")
	if h.state != wire.HealthQuarantined || h.by != wire.QuarantinedBySystem || h.failures != 3 ||
		!strings.Contains(h.reason, "3 consecutive") || !strings.Contains(h.reason, "the board did not answer") {
		t.Fatalf("after three infra failures: %+v", h)
	}
	res := env.Submit(apitest.NewRun("r4", "board"))
	if res.Run.State != wire.Queued {
		t.Fatalf("a run only the quarantined node serves: %s, want QUEUED", res.Run.State)
	}
	if env.Wake().Promoted != 0 || env.State("r4") != wire.Queued {
		t.Fatal("a wake placed a run on a quarantined node")
	}
	var history []string
	rows, err := env.Store.Pool().Query(context.Background(), `SELECT from_state || '>' || to_state || ':' || by
		FROM node_history WHERE node_id = 'A' AND kind = 'health' ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		history = append(history, line)
	}
	if got := strings.Join(history, " "); got != "healthy>suspect:system suspect>quarantined:system" {
		t.Fatalf("history: %s", got)
	}
	env.CheckInvariants()
}

// Test failures never count against the node, however many; a success after an infra failure
// resets the count and the node is healthy again.
func TestTestFailuresNeverCountAndASuccessResets(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		place(env, id, "board")
		failure := wire.FailureTest
		if i%2 == 0 {
			failure = "" // the default is a test failure
		}
		fail(env, "A", "b1", id, failure)
	}
	if h := nodeHealth(env, "A"); h.state != wire.HealthHealthy || h.failures != 0 {
		t.Fatalf("after five test failures: %+v", h)
	}
	place(env, "i1", "board")
	fail(env, "A", "b1", "i1", wire.FailureInfra)
	place(env, "ok", "board")
	env.Finish("A", "b1", "ok", wire.ReportSucceeded)
	if h := nodeHealth(env, "A"); h.state != wire.HealthHealthy || h.failures != 0 || h.reason != "" {
		t.Fatalf("an infra failure, then a success: %+v", h)
	}
	env.CheckInvariants()
}

// A run lost by its lease's expiry counts once against the node that lost it, never against its
// run-mate; a restart counts likewise.
func TestALostLeaseCountsAgainstTheLostNodeOnly(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "dut")
	env.Heartbeat("B", "b1", false, "host")
	pair := apitest.NewRun("pair")
	pair.Roles = []wire.NewRole{{Name: "dut", Needs: []string{"dut"}}, {Name: "host", Needs: []string{"host"}}}
	pair.Steps = []wire.NewStep{{ID: "s1", Role: "dut", After: []string{}, Spec: []byte(`{}`)},
		{ID: "s2", Role: "host", After: []string{}, Spec: []byte(`{}`)}}
	if res := env.Submit(pair); res.Run.State != wire.Running {
		t.Fatalf("pair: %s", res.Run.State)
	}
	// A falls silent; B goes on heartbeating.
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
	env.Exec(`UPDATE heartbeat_pulse SET heard_at = now()`)
	if sum := env.Reap(); sum.Expired != 1 {
		t.Fatalf("reap: %+v", sum)
	}
	if a, b := nodeHealth(env, "A"), nodeHealth(env, "B"); a.failures != 1 || a.state != wire.HealthSuspect || b.failures != 0 {
		t.Fatalf("after A's lease expired: A %+v, B %+v", a, b)
	}
	// B restarts under a run of its own.
	place(env, "solo", "host")
	env.Heartbeat("B", "b2", false, "host")
	if env.State("solo") != wire.Failed {
		t.Fatalf("solo: %s", env.State("solo"))
	}
	if a, b := nodeHealth(env, "A"), nodeHealth(env, "B"); a.failures != 1 || b.failures != 1 || b.state != wire.HealthSuspect {
		t.Fatalf("after B restarted: A %+v, B %+v", a, b)
	}
	env.CheckInvariants()
}

// What the system's own outage cost is no node's fault: a lease the outage grace renewed, and a
// loss while the whole fleet was silent, count against nobody.
func TestAnOutageCountsAgainstNoNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	running(env, "A")
	elapse(env, leaseTTL(env)+time.Second, false)
	if sum := env.Reap(); sum.OutageGrace != 1 {
		t.Fatalf("first reap: %+v", sum)
	}
	elapse(env, leaseTTL(env)+time.Second, false)
	if sum := env.Reap(); sum.Expired != 1 {
		t.Fatalf("one TTL later: %+v", sum)
	}
	if h := nodeHealth(env, "A"); h.failures != 0 || h.state != wire.HealthHealthy {
		t.Fatalf("a loss while the fleet was silent counted: %+v", h)
	}
}

// Many writers at once on one node — its infra failure reported over and over, the reaper and
// a restart racing the report for the same lease — count each failure exactly once: one of
// them wins each lease, and the count is the node's row, written under its lock.
func TestConcurrentLossesAndReportsCountEachFailureOnce(t *testing.T) {
	t.Parallel()
	const rounds = 8
	env := apitest.New(t, apitest.PoolSize(12), apitest.Configure(func(c *config.Config) { c.QuarantineAfter = 1000 }))
	ctx := context.Background()
	env.Heartbeat("B", "b1", false, "other") // a live fleet: the losses are A's own
	boot := "b0"
	env.Heartbeat("A", boot, false, "board")
	for round := range rounds {
		id := fmt.Sprintf("r%d", round)
		place(env, id, "board")
		epoch := env.Epoch("A")
		if r := env.Report("A", boot, epoch, id, "s1", wire.ReportStarted); r.Status != 200 {
			t.Fatal(r)
		}
		env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
		env.Exec(`UPDATE heartbeat_pulse SET heard_at = now()`)
		next := fmt.Sprintf("b%d", round+1)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := env.Store.Report(ctx, wire.Report{RunID: id, StepID: "s1", NodeID: "A", BootID: boot, Epoch: epoch,
					Status: wire.ReportFailed, Failure: wire.FailureInfra, ExitCode: new(int)})
				if err != nil && !errors.Is(err, store.ErrStaleAssignment) {
					errs <- err
				}
			}()
		}
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := env.Store.ReapLease(ctx, "A", epoch); err != nil {
					errs <- err
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := env.Store.Heartbeat(ctx, wire.Heartbeat{NodeID: "A", BootID: next, Labels: []string{"board"}}); err != nil {
				errs <- err
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		boot = next
		env.Heartbeat("A", boot, false, "board")
		if h := nodeHealth(env, "A"); h.failures != round+1 {
			t.Fatalf("after round %d: %d failures counted, want %d", round, h.failures, round+1)
		}
		if env.Count(`SELECT count(*) FROM leases WHERE node_id = 'A'`) != 0 || env.State(id) != wire.Failed {
			t.Fatalf("round %d: %s is %s", round, id, env.State(id))
		}
	}
	env.CheckInvariants()
}

// A node's history is kept as long as the runs: the reaper prunes what is older than
// RUN_RETENTION_DAYS, but never a health change still to publish.
func TestNodeHistoryIsPrunedWithRetention(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	place(env, "r1", "board")
	fail(env, "A", "b1", "r1", wire.FailureInfra)
	env.Exec(`UPDATE node_history SET at = now() - interval '31 days'`)
	env.Exec(`INSERT INTO node_events_unpublished (event_id) SELECT event_id FROM node_history WHERE kind = 'health'`)
	env.Reap()
	if n := env.Count(`SELECT count(*) FROM node_history`); n != 1 {
		t.Fatalf("%d lines of history left, want the unpublished health change alone", n)
	}
}

// Of two boards alike, the wake and the submit take the healthy one; the suspect one serves
// when it is all there is.
func TestAHealthyNodeIsTakenBeforeASuspectOne(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Heartbeat("B", "b1", false, "board")
	env.Exec(`UPDATE nodes SET health = 'suspect', infra_failures = 1 WHERE node_id = 'A'`)
	for i := range 6 {
		id := fmt.Sprintf("r%d", i)
		place(env, id, "board")
		if env.Count(`SELECT count(*) FROM leases WHERE run_id = $1 AND node_id = 'B'`, id) != 1 {
			t.Fatalf("%s was placed on the suspect A beside the healthy B", id)
		}
		if i == 5 {
			break
		}
		env.Finish("B", "b1", id, wire.ReportSucceeded)
	}
	place(env, "last", "board") // B holds r5: only the suspect A serves
	if env.Count(`SELECT count(*) FROM leases WHERE run_id = 'last' AND node_id = 'A'`) != 1 {
		t.Fatal("the suspect A did not serve when it was all there was")
	}
	// Queued behind both, a run goes to the healthy node the wake finds free.
	queued := env.Submit(apitest.NewRun("queued", "board"))
	if queued.Run.State != wire.Queued {
		t.Fatalf("queued: %s", queued.Run.State)
	}
	env.Finish("B", "b1", "r5", wire.ReportSucceeded)
	if env.Count(`SELECT count(*) FROM leases WHERE run_id = 'queued' AND node_id = 'B'`) != 1 {
		t.Fatalf("queued is %s, not on B", env.State("queued"))
	}
}

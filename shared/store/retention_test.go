package store_test

import (
	"context"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/store"
)

// seedFinished writes n runs that ended days ago, each with a role, a step and two events.
func seedFinished(t *testing.T, env *apitest.Env, prefix string, n, days int) {
	t.Helper()
	env.Exec(`INSERT INTO runs (run_id, name, owner, state, reason, request_hash, shape, width, max_attempts, created_at, started_at, finished_at)
		SELECT $1 || i, $1 || i, 'client:t', 'FAILED', 'step_failed', '\x00', '[["board"]]', 1, 1,
		       now() - make_interval(days => $3 + 1), now() - make_interval(days => $3 + 1), now() - make_interval(days => $3)
		FROM generate_series(1, $2) i`, prefix, n, days)
	env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs) SELECT $1 || i, 'main', 0, '{board}' FROM generate_series(1, $2) i`, prefix, n)
	env.Exec(`INSERT INTO steps (run_id, step_id, role, ordinal, state, finished_at, tries) SELECT $1 || i, 's1', 'main', 0, 'FAILED', now(), 1
		FROM generate_series(1, $2) i`, prefix, n)
	env.Exec(`INSERT INTO run_events (run_id, attempt, kind, from_state, to_state) SELECT $1 || i, 1, k, f, s
		FROM generate_series(1, $2) i, (VALUES ('submitted', NULL, 'RUNNING'), ('settled', 'RUNNING', 'FAILED')) e(k, f, s)`, prefix, n)
}

// Ten thousand runs past retention go across several reaps, each within its invocation's
// deadline, with their roles, steps and history; live runs, runs not yet past retention, and
// runs with an event still to publish stay.
func TestRetentionPrunesOldRunsOnly(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.RetentionDays = 30 }))
	seedFinished(t, env, "old-", 10000, 40)
	seedFinished(t, env, "recent-", 50, 10)
	seedFinished(t, env, "unpublished-", 20, 40)
	env.Exec(`INSERT INTO run_events_unpublished (event_id) SELECT event_id FROM run_events WHERE run_id LIKE 'unpublished-%'`)
	if err := env.Store.SetPublishing(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("live-running", "board"))
	env.Submit(apitest.NewRun("live-queued", "board"))
	env.Exec(`UPDATE runs SET created_at = now() - interval '100 days' WHERE run_id LIKE 'live-%'`)

	pruned, reaps := 0, 0
	for pruned < 10000 {
		reaps++
		if reaps > 200 {
			t.Fatalf("%d pruned after 200 reaps", pruned)
		}
		// An invocation with little time left: the sweep stops before its deadline.
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(store.ReapMargin+500*time.Millisecond))
		sum, err := env.Store.Reap(ctx, store.ReapParams{})
		cancel()
		if err != nil {
			t.Fatalf("reap %d: %v", reaps, err)
		}
		if sum.Pruned < 10000-pruned && !sum.Unfinished {
			t.Fatalf("reap %d pruned %d, left some, and did not say it was unfinished", reaps, sum.Pruned)
		}
		pruned += sum.Pruned
	}
	if pruned != 10000 || reaps < 2 {
		t.Fatalf("pruned %d in %d reaps", pruned, reaps)
	}
	for prefix, want := range map[string]int{"old-": 0, "recent-": 50, "unpublished-": 20, "live-": 2} {
		if n := env.Count(`SELECT count(*) FROM runs WHERE run_id LIKE $1 || '%'`, prefix); n != want {
			t.Errorf("%s runs left: %d, want %d", prefix, n, want)
		}
	}
	for _, table := range []string{"steps", "run_roles", "run_events"} {
		if n := env.Count(`SELECT count(*) FROM ` + table + ` WHERE run_id LIKE 'old-%'`); n != 0 {
			t.Errorf("%d %s rows of pruned runs left", n, table)
		}
	}
	// With publishing off, a mark holds nothing back.
	if err := env.Store.SetPublishing(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if sum := env.Reap(); sum.Pruned != 20 {
		t.Fatalf("with publishing off, pruned %d of the 20 marked runs", sum.Pruned)
	}
	env.CheckInvariants()
}

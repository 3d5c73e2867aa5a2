package httpapi_test

import (
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

// notice is one hold notice of a run, as run_events holds it.
type notice struct {
	attempt        int
	from, to, why  string
	count, ordinal int // how many of its kind the run has; this one's place in its history
}

// noticeOf is run's one event of kind (failing the test if it has another number of them).
func noticeOf(env *apitest.Env, run, kind string) notice {
	env.T.Helper()
	var n notice
	err := env.Store.Pool().QueryRow(env.T.Context(), `
		SELECT attempt, coalesce(from_state, ''), to_state, coalesce(reason, ''), count(*) OVER (),
		       (SELECT count(*) FROM run_events x WHERE x.run_id = e.run_id AND x.event_id <= e.event_id)
		FROM run_events e WHERE run_id = $1 AND kind = $2`, run, kind).
		Scan(&n.attempt, &n.from, &n.to, &n.why, &n.count, &n.ordinal)
	if err != nil || n.count != 1 {
		env.T.Fatalf("%s's %s: %+v, %v; want one", run, kind, n, err)
	}
	return n
}

// notices counts the hold notices of these runs.
func notices(env *apitest.Env, runs ...string) int {
	env.T.Helper()
	return env.Count(`SELECT count(*) FROM run_events WHERE run_id = ANY ($1)
		AND kind IN ('hold_placed', 'hold_expiring', 'hold_ended')`, runs)
}

// A hold placed at its submit and one placed by a wake each write hold_placed, RUNNING to
// RUNNING right after the event that placed them; each way a hold ends writes hold_ended, from
// the state it ended in to the final one, with the run's reason, right after the event that
// ended it; ordinary runs write no notice.
func TestAHoldsPlacementAndEndAreNotices(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("first", 3600, "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	if n := noticeOf(env, "first", "hold_placed"); n != (notice{1, wire.Running, wire.Running, "", 1, 2}) {
		t.Fatalf("a hold placed at submit: %+v", n)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("second", 3600, "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", holdOn("queued", 3600, "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	if notices(env, "second", "queued") != 0 {
		t.Fatal("a queued hold has a notice")
	}
	env.Do(alice, "POST", "/v1/runs/first/release", nil)
	if env.State("second") != wire.Running {
		t.Fatalf("second is %s after the release", env.State("second"))
	}
	if n := noticeOf(env, "first", "hold_ended"); n != (notice{1, wire.Running, wire.Succeeded, "", 1, 4}) {
		t.Fatalf("a released hold: %+v", n)
	}
	if n := noticeOf(env, "second", "hold_placed"); n != (notice{1, wire.Running, wire.Running, "", 1, 3}) {
		t.Fatalf("a hold placed by a wake: %+v (history %s)", n, history(env, "second"))
	}
	// Cancelled: queued, then placed.
	env.Do(alice, "POST", "/v1/runs/queued/cancel", nil)
	if n := noticeOf(env, "queued", "hold_ended"); n != (notice{1, wire.Queued, wire.Cancelled, wire.ReasonCancelled, 1, 3}) {
		t.Fatalf("a queued hold cancelled: %+v", n)
	}
	env.Do(alice, "POST", "/v1/runs/second/cancel", nil)
	if n := noticeOf(env, "second", "hold_ended"); n.from != wire.Running || n.to != wire.Cancelled || n.why != wire.ReasonCancelled {
		t.Fatalf("a placed hold cancelled: %+v", n)
	}
	// Time up.
	env.Do(alice, "POST", "/v1/runs", holdOn("timed", 3600, "board"))
	env.Exec(`UPDATE runs SET hold_ends_at = now() - interval '1 second' WHERE run_id = 'timed'`)
	if sum := env.Reap(); sum.HoldsEnded != 1 {
		t.Fatalf("the reap ended %d holds", sum.HoldsEnded)
	}
	if n := noticeOf(env, "timed", "hold_ended"); n.from != wire.Running || n.to != wire.Succeeded || n.why != "" || history(env, "timed") != "submitted hold_placed hold_expired hold_ended" {
		t.Fatalf("a hold whose time was up: %+v (history %s)", n, history(env, "timed"))
	}
	// A node lost.
	env.Do(alice, "POST", "/v1/runs", holdOn("lost", 3600, "board"))
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
	env.Reap()
	if n := noticeOf(env, "lost", "hold_ended"); n != (notice{1, wire.Running, wire.Failed, wire.ReasonLeaseExpired, 1, 4}) {
		t.Fatalf("a hold whose node was lost: %+v (history %s)", n, history(env, "lost"))
	}
	if got := history(env, "lost"); got != "submitted hold_placed node_lost hold_ended" {
		t.Fatalf("the lost hold's history: %s", got)
	}
	for _, h := range []string{"first", "second", "queued", "timed", "lost"} {
		if resp := env.Do(alice, "GET", "/v1/runs/"+h, nil); resp.Status != 200 { // its history, as the document says
			t.Fatalf("GET %s: %s", h, resp)
		}
	}
	// Ordinary runs: placed, queued and promoted, cancelled, lost.
	env.Beat("A", "b1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r1", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r2", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r3", "board"))
	env.Do(alice, "POST", "/v1/runs/r3/cancel", nil)
	env.Finish("A", "b1", "r1", "succeeded")
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
	env.Reap()
	if env.State("r1") != wire.Succeeded || env.State("r3") != wire.Cancelled || env.Count(`SELECT count(*) FROM run_events WHERE run_id = 'r2' AND kind = 'node_lost'`) != 1 {
		t.Fatalf("the ordinary runs: r1 %s, r2 %s (%s), r3 %s", env.State("r1"), env.State("r2"), history(env, "r2"), env.State("r3"))
	}
	if n := notices(env, "r1", "r2", "r3"); n != 0 {
		t.Fatalf("ordinary runs wrote %d hold notices", n)
	}
	env.CheckInvariants()
}

// The reaper warns of a placed hold's end once it is within HOLD_EXPIRING_LEAD_SECONDS, once
// per end: an extend that moved it later makes a new warning due when the new end nears. A
// queued hold, an ended one and an ordinary run are never warned of.
func TestTheReaperWarnsOncePerEnd(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	env.Beat("B", "b1", false, "other")
	env.Do(alice, "POST", "/v1/runs", holdOn("h", 3600, "board"))
	env.Do(alice, "POST", "/v1/runs", holdOn("waiting", 60, "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("plain", "other"))
	if sum := env.Reap(); sum.HoldsWarned != 0 {
		t.Fatalf("a reap an hour before the end warned %d", sum.HoldsWarned)
	}
	env.Exec(`UPDATE runs SET hold_ends_at = now() + interval '300 seconds' WHERE run_id = 'h'`)
	if sum := env.Reap(); sum.HoldsWarned != 1 {
		t.Fatalf("a reap 5 minutes before the end warned %d", sum.HoldsWarned)
	}
	if n := noticeOf(env, "h", "hold_expiring"); n.from != wire.Running || n.to != wire.Running || n.attempt != 1 {
		t.Fatalf("the warning: %+v", n)
	}
	if sum := env.Reap(); sum.HoldsWarned != 0 {
		t.Fatalf("a second reap before the same end warned %d", sum.HoldsWarned)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/h/extend", map[string]any{"seconds": 3600}); resp.Status != 200 {
		t.Fatal(resp)
	}
	if sum := env.Reap(); sum.HoldsWarned != 0 {
		t.Fatalf("a reap an hour before the extended end warned %d", sum.HoldsWarned)
	}
	env.Exec(`UPDATE runs SET hold_ends_at = hold_ends_at - interval '3700 seconds' WHERE run_id = 'h'`)
	if sum := env.Reap(); sum.HoldsWarned != 1 {
		t.Fatalf("a reap as the extended end nears warned %d", sum.HoldsWarned)
	}
	if sum := env.Reap(); sum.HoldsWarned != 0 {
		t.Fatalf("a second reap before the extended end warned %d", sum.HoldsWarned)
	}
	if n := env.Count(`SELECT count(*) FROM run_events WHERE run_id = 'h' AND kind = 'hold_expiring'`); n != 2 {
		t.Fatalf("%d warnings of two ends", n)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE run_id = 'h' AND hold_warned_for = hold_ends_at`); n != 1 {
		t.Fatal("the hold does not remember the end it was warned of")
	}
	if got := history(env, "h"); got != "submitted hold_placed hold_expiring hold_extended hold_expiring" {
		t.Fatalf("the hold's history: %s", got)
	}
	env.Do(alice, "POST", "/v1/runs/h/release", nil)
	if env.State("waiting") != wire.Running {
		t.Fatalf("waiting is %s", env.State("waiting"))
	}
	// A hold placed shorter than the lead is warned at the next reap, once; one ended is not.
	if sum := env.Reap(); sum.HoldsWarned != 1 {
		t.Fatalf("a reap within a minute's hold warned %d", sum.HoldsWarned)
	}
	env.Do(alice, "POST", "/v1/runs/waiting/release", nil)
	if sum := env.Reap(); sum.HoldsWarned != 0 || notices(env, "plain") != 0 {
		t.Fatalf("a reap after every hold ended warned %d; plain has %d notices", sum.HoldsWarned, notices(env, "plain"))
	}
	if got := history(env, "waiting"); got != "submitted promoted hold_placed hold_expiring hold_released hold_ended" {
		t.Fatalf("the minute's hold's history: %s", got)
	}
	env.CheckInvariants()
}

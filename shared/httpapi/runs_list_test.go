package httpapi_test

// GET /v1/runs answers every page, whatever plan PostgreSQL picks for the list's statement —
// its choice follows the statistics, which autovacuum changes under a running service — and
// the pages are the same under each: the same runs, in the same order, each queued one at
// its place in the queue.

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// page is GET /v1/runs' answer.
type page struct {
	Runs []store.Run `json:"runs"`
	Next *string     `json:"next"`
}

// listPages walks GET /v1/runs?<query> as who, limit runs a page, for at most pages pages (0:
// to the end), and returns the runs listed, in order. A page that is not 200 fails the test
// (what says where) and ends the walk: ok is false.
func listPages(t *testing.T, env *apitest.Env, what string, who auth.Principal, query string, limit, pages int) (runs []store.Run, ok bool) {
	t.Helper()
	after := ""
	for n := 1; pages == 0 || n <= pages; n++ {
		resp := env.Do(who, "GET", fmt.Sprintf("/v1/runs?%slimit=%d%s", query, limit, after), nil)
		if resp.Status != 200 {
			shown := resp.String()
			if len(shown) > 300 {
				shown = shown[:300] + "…"
			}
			t.Errorf("%s, page %d: %s", what, n, shown)
			return runs, false
		}
		var p page
		resp.Decode(t, &p)
		runs = append(runs, p.Runs...)
		if p.Next == nil {
			break
		}
		after = "&after=" + *p.Next
	}
	return runs, true
}

// truth is the database's own answer to what a list must say, read from the runs table with
// the orders DESIGN.md gives written out: for each run in the list's order (newest first), its
// owner, state and priority; and each queued run's place in the queue (priority, higher
// first, then arrival).
type truth struct {
	newestFirst []listedRun
	position    map[string]int
}

type listedRun struct {
	ID, Owner, State string
	Priority         int
}

func readTruth(t *testing.T, env *apitest.Env) truth {
	t.Helper()
	ctx := context.Background()
	rows, err := env.Store.Pool().Query(ctx, `SELECT run_id, owner, state, priority FROM runs ORDER BY created_at DESC, run_id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[listedRun])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = env.Store.Pool().Query(ctx, `SELECT run_id FROM runs WHERE state = 'QUEUED' ORDER BY priority DESC, created_at, run_id`)
	if err != nil {
		t.Fatal(err)
	}
	queue, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	tr := truth{newestFirst: all, position: map[string]int{}}
	for i, id := range queue {
		tr.position[id] = i
	}
	return tr
}

// want is what a list must hold, in order: the runs who may see that match keep.
func (tr truth) want(who auth.Principal, keep func(listedRun) bool) []string {
	var ids []string
	for _, r := range tr.newestFirst {
		if (who.IsAdmin() || r.Owner == who.Owner()) && keep(r) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// check walks the pages as listPages does, and fails the test for a list that is not the runs
// wanted, in order, or for a run listed at another place in the queue than its own (or with a
// place while not queued).
func (tr truth) check(t *testing.T, env *apitest.Env, what string, who auth.Principal, query string, limit, pages int, want []string) {
	t.Helper()
	what = fmt.Sprintf("%s: %s, ?%s", what, who.ID, query)
	listed, ok := listPages(t, env, what, who, query, limit, pages)
	if !ok {
		return
	}
	var got []string
	for _, r := range listed {
		got = append(got, r.RunID)
		place, queued := tr.position[r.RunID]
		switch {
		case queued && (r.QueuePosition == nil || *r.QueuePosition != place):
			t.Errorf("%s: %s listed at %s, its place is %d", what, r.RunID, position(r), place)
		case !queued && r.QueuePosition != nil:
			t.Errorf("%s: %s (%s) listed at %d in the queue", what, r.RunID, r.State, *r.QueuePosition)
		}
	}
	if pages > 0 && len(want) > len(got) {
		want = want[:len(got)]
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s listed\n %v\nwant\n %v", what, got, want)
	}
}

// The filters a page may have, each with the runs it keeps.
var listFilters = []struct {
	query string
	keep  func(listedRun) bool
}{
	{"", func(listedRun) bool { return true }},
	{"state=QUEUED&", func(r listedRun) bool { return r.State == wire.Queued }},
	{"state=RUNNING&", func(r listedRun) bool { return r.State == wire.Running }},
	{"state=SUCCEEDED&", func(r listedRun) bool { return r.State == wire.Succeeded }},
	{"state=FAILED&", func(r listedRun) bool { return r.State == wire.Failed }},
	{"state=CANCELLED&", func(r listedRun) bool { return r.State == wire.Cancelled }},
	{"priority=50&", func(r listedRun) bool { return r.Priority == 50 }},
	{"state=QUEUED&priority=20&", func(r listedRun) bool { return r.State == wire.Queued && r.Priority == 20 }},
}

// Runs in every state, a client's among others' and an admin's: pages of two, some holding
// queued runs and some none, while other owners' runs are queued — for alice and for an
// admin, under every filter, under each plan, before and after the tables have statistics.
func TestRunListUnderEveryPlan(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.KeepStatistics()
	env.Beat("A", "b1", false, "board")
	bob := apitest.Client("bob")
	for _, s := range []struct {
		who    auth.Principal
		run    map[string]any
		status int
	}{
		{alice, oneNodeRun("a-running", "board"), 201},
		{bob, prioritized("b-q1", 50, "board"), 202},
		{alice, oneNodeRun("a-q1", "board"), 202},
		{alice, oneNodeRun("a-refused1", "gpu"), 422},
		{bob, prioritized("b-q2", 20, "board"), 202},
		{alice, oneNodeRun("a-refused2", "gpu"), 422},
		{alice, oneNodeRun("a-refused3", "gpu"), 422},
		{alice, prioritized("a-q2", 20, "board"), 202},
		{apitest.Admin, prioritized("ops-q1", 90, "board"), 202},
		{alice, oneNodeRun("a-cancelled", "board"), 202},
		{alice, prioritized("a-q3", 40, "board"), 202},
		{bob, prioritized("b-q3", 50, "board"), 202},
		{alice, oneNodeRun("a-refused4", "gpu"), 422},
		{alice, oneNodeRun("a-refused5", "gpu"), 422},
		{apitest.Admin, prioritized("ops-q2", 10, "board"), 202},
	} {
		if resp := env.Do(s.who, "POST", "/v1/runs", s.run); resp.Status != s.status {
			t.Fatalf("%s: %s", s.run["run_id"], resp)
		}
	}
	if resp := env.Do(alice, "POST", "/v1/runs/a-cancelled/cancel", nil); resp.Status != 200 {
		t.Fatalf("cancel: %s", resp)
	}
	// a-running succeeds, and A goes to the first of the queue (ops-q1).
	env.Finish("A", "b1", "a-running", "succeeded")
	if env.State("a-running") != wire.Succeeded || env.State("ops-q1") != wire.Running {
		t.Fatalf("a-running %s, ops-q1 %s", env.State("a-running"), env.State("ops-q1"))
	}
	tr := readTruth(t, env)
	if len(tr.position) != 7 {
		t.Fatalf("%d runs queued; the test is built for 7", len(tr.position))
	}
	for _, stats := range []string{"no statistics", "analyzed"} {
		if stats == "analyzed" {
			env.Exec(`ANALYZE`)
		}
		for _, plan := range apitest.Plans {
			planned := env.OnPlan(plan)
			for _, who := range []auth.Principal{alice, apitest.Admin} {
				for _, f := range listFilters {
					tr.check(t, planned, stats+", "+plan.Name, who, f.query, 2, 0, tr.want(who, f.keep))
				}
			}
		}
	}
}

// The acceptance case: 5,000 refused runs and not one queued. Every page answers, for the
// client and an admin, under each plan, before and after the tables have statistics; and once
// runs are queued, the pages that hold them give each its place.
func TestRunListOfThousandsOfRefusedRuns(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.KeepStatistics()
	env.Beat("A", "b1", false, "board")
	bob := apitest.Client("bob")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("refused", "gpu")); resp.Status != 422 {
		t.Fatalf("refused: %s", resp)
	}
	env.CopyRun("refused", "refused-", 4999)
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'FAILED' AND reason = 'no_capable_node'`); n != 5000 {
		t.Fatalf("%d refused runs", n)
	}
	all := readTruth(t, env)
	everyRun := func(listedRun) bool { return true }
	for _, stats := range []string{"no statistics", "analyzed"} {
		if stats == "analyzed" {
			env.Exec(`ANALYZE`)
		}
		for _, plan := range apitest.Plans {
			planned := env.OnPlan(plan)
			for _, who := range []auth.Principal{alice, apitest.Admin} {
				all.check(t, planned, stats+", "+plan.Name, who, "", 100, 0, all.want(who, everyRun))
			}
		}
	}

	// Runs queued among the refused: alice's behind a run of bob's and an admin's. The node
	// beats again first: the reads above may outlast its advert.
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("hold", "board")); resp.Status != 201 {
		t.Fatalf("hold: %s", resp)
	}
	for _, s := range []struct {
		who auth.Principal
		run map[string]any
	}{
		{alice, oneNodeRun("late-1", "board")},
		{bob, prioritized("late-bob", 50, "board")},
		{alice, prioritized("late-2", 30, "board")},
		{apitest.Admin, prioritized("late-ops", 80, "board")},
		{alice, oneNodeRun("late-3", "board")},
	} {
		if resp := env.Do(s.who, "POST", "/v1/runs", s.run); resp.Status != 202 {
			t.Fatalf("%s: %s", s.run["run_id"], resp)
		}
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun(fmt.Sprint(s.run["run_id"], "-refused"), "gpu")); resp.Status != 422 {
			t.Fatalf("a refusal between queued runs: %s", resp)
		}
	}
	queued := readTruth(t, env)
	for _, plan := range apitest.Plans {
		planned := env.OnPlan(plan)
		for _, who := range []auth.Principal{alice, apitest.Admin} {
			what := "queued among the refused, " + plan.Name
			queued.check(t, planned, what, who, "", 3, 5, queued.want(who, everyRun))
			queued.check(t, planned, what, who, "state=QUEUED&", 2, 0, queued.want(who, func(r listedRun) bool { return r.State == wire.Queued }))
		}
	}
}

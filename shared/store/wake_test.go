package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// waiting is a run that queues even when no node of the fleet could serve it yet.
func waiting(id string, needs ...string) wire.NewRun {
	r := apitest.NewRun(id, needs...)
	r.WaitForCapacity = true
	return r
}

func TestWakeEmptyQueueDoesNothing(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board=rpi4")
	if res := env.Wake(); res.Promoted != 0 || res.Walked != 0 {
		t.Fatalf("empty queue: %+v", res)
	}
}

// One matching run is promoted with everything a RUNNING run holds.
func TestWakePromotesAMatchingRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	if r := env.Submit(waiting("r1", "board=rpi4")); r.Run.State != wire.Queued {
		t.Fatalf("with no node: %s", r.Run.State)
	}
	env.Heartbeat("A", "b1", false, "board=rpi4")
	if res := env.Wake(); res.Promoted != 1 {
		t.Fatalf("wake: %+v", res)
	}
	run, err := env.Store.GetRun(context.Background(), store.RunRef{Name: "r1", Viewer: store.Viewer{Admin: true}})
	if err != nil {
		t.Fatal(err)
	}
	if run.State != wire.Running || run.StartedAt == nil || run.Roles["main"].NodeID != "A" || run.Assigned["main"] != "A" {
		t.Fatalf("promoted run: %+v", run)
	}
	if n := env.Count(`SELECT count(*) FROM leases WHERE node_id = 'A' AND run_id = 'r1' AND epoch > 0 AND expires_at > now()`); n != 1 {
		t.Fatalf("lease rows: %d", n)
	}
	if n := env.Count(`SELECT count(*) FROM run_events WHERE run_id = 'r1' AND kind = 'promoted' AND to_state = 'RUNNING'`); n != 1 {
		t.Fatalf("promotion events: %d", n)
	}
}

// Two runs want the same node: the older one gets it.
func TestWakeKeepsArrivalOrder(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("first", "board=rpi4"))
	env.Submit(waiting("second", "board=rpi4"))
	env.Heartbeat("A", "b1", false, "board=rpi4")
	env.Wake()
	if env.State("first") != wire.Running || env.State("second") != wire.Queued {
		t.Fatalf("first %s, second %s", env.State("first"), env.State("second"))
	}
}

// Arrival order holds across shapes too: runs with different needs that both fit the node.
func TestWakeKeepsArrivalOrderAcrossShapes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("z-older", "usb-relay"))
	env.Submit(waiting("a-younger", "board=rpi4"))
	env.Exec(`UPDATE runs SET created_at = now() - interval '1 minute' WHERE run_id = 'z-older'`)
	env.Heartbeat("A", "b1", false, "board=rpi4", "usb-relay")
	env.Wake()
	if env.State("z-older") != wire.Running || env.State("a-younger") != wire.Queued {
		t.Fatalf("older %s, younger %s", env.State("z-older"), env.State("a-younger"))
	}
}

// A head waiting for a GPU does not block a later run waiting for a board.
func TestWakeBackfillsPastAHeadThatCannotGo(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("gpu-run", "gpu"))
	env.Submit(waiting("board-run", "board=rpi4"))
	env.Heartbeat("A", "b1", false, "board=rpi4")
	env.Wake()
	if env.State("gpu-run") != wire.Queued || env.State("board-run") != wire.Running {
		t.Fatalf("gpu-run %s, board-run %s", env.State("gpu-run"), env.State("board-run"))
	}
}

func TestWakeIsIdempotent(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("r1", "board=rpi4"))
	env.Submit(waiting("r2", "board=rpi4"))
	env.Heartbeat("A", "b1", false, "board=rpi4")
	first, second := env.Wake(), env.Wake()
	if first.Promoted != 1 || second.Promoted != 0 {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	if n := env.Count(`SELECT count(*) FROM leases`); n != 1 {
		t.Fatalf("%d leases", n)
	}
}

func TestWakeNeverPlacesOnADrainingNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("r1", "board=rpi4"))
	env.Heartbeat("A", "b1", true, "board=rpi4")
	if res := env.Wake(); res.Promoted != 0 || env.State("r1") != wire.Queued {
		t.Fatalf("draining node used: %+v, %s", res, env.State("r1"))
	}
	env.Heartbeat("A", "b1", false, "board=rpi4")
	if res := env.Wake(); res.Promoted != 1 {
		t.Fatalf("after the drain was lifted: %+v", res)
	}
}

func TestWakeRefusesLeaseTTLZero(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	st := store.New(env.Store.Pool(), store.Settings{LeaseTTL: 0, MaxRunWidth: 16}, nil)
	if _, err := st.WakeQueued(context.Background(), store.WakeParams{}); !errors.Is(err, store.ErrLeaseTTL) {
		t.Fatalf("LEASE_TTL 0: %v", err)
	}
}

// A wide run that has waited past STARVATION_SECONDS keeps the node it could use free, so a
// stream of narrow runs cannot starve it; it runs as soon as its second board frees up.
func TestWakeDoesNotStarveAWideRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Starvation = time.Hour }))
	env.Heartbeat("B1", "b1", false, "board")
	hold := env.Submit(apitest.NewRun("hold", "board"))
	if hold.Run.State != wire.Running {
		t.Fatalf("hold: %s", hold.Run.State)
	}
	wide := waiting("wide", "board")
	wide.Roles = []wire.NewRole{{Name: "a", Needs: []string{"board"}}, {Name: "b", Needs: []string{"board"}}}
	wide.Steps = []wire.NewStep{{ID: "sa", Role: "a", After: []string{}, Spec: []byte(`{}`)}, {ID: "sb", Role: "b", After: []string{}, Spec: []byte(`{}`)}}
	env.Submit(wide)
	env.Exec(`UPDATE runs SET created_at = now() - interval '2 hours' WHERE run_id = 'wide'`)
	env.Heartbeat("B2", "b1", false, "board")
	for i := range 5 {
		narrow := env.Submit(apitest.NewRun(fmt.Sprintf("narrow-%d", i), "board"))
		if narrow.Run.State != wire.Queued {
			t.Fatalf("narrow-%d took the board the starving wide run is waiting for: %s", i, narrow.Run.State)
		}
	}
	env.Wake()
	if n := env.Count(`SELECT count(*) FROM leases WHERE node_id = 'B2'`); n != 0 {
		t.Fatal("B2 was given to a younger run")
	}
	// The held board frees up: the wide run goes first, on both boards.
	env.Exec(`UPDATE steps SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'hold'`)
	env.Exec(`DELETE FROM leases WHERE run_id = 'hold'`)
	env.Exec(`UPDATE runs SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'hold'`)
	env.Wake()
	if env.State("wide") != wire.Running {
		t.Fatalf("wide: %s", env.State("wide"))
	}
}

// Without starvation protection a young wide run does not hold up narrow ones (backfill).
func TestWakeBackfillsPastAYoungWideRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Starvation = time.Hour }))
	env.Heartbeat("B1", "b1", false, "board")
	env.Submit(apitest.NewRun("hold", "board"))
	wide := waiting("wide", "board")
	wide.Roles = []wire.NewRole{{Name: "a", Needs: []string{"board"}}, {Name: "b", Needs: []string{"board"}}}
	wide.Steps = []wire.NewStep{{ID: "sa", Role: "a", After: []string{}, Spec: []byte(`{}`)}, {ID: "sb", Role: "b", After: []string{}, Spec: []byte(`{}`)}}
	env.Submit(wide)
	env.Submit(apitest.NewRun("narrow", "board"))
	env.Heartbeat("B2", "b1", false, "board")
	env.Wake()
	if env.State("narrow") != wire.Running || env.State("wide") != wire.Queued {
		t.Fatalf("narrow %s, wide %s", env.State("narrow"), env.State("wide"))
	}
}

// 20 goroutines wake a queue of 200 runs over 10 nodes at once: no node is leased twice, no
// run promoted twice, and when they have all returned no queued run could use a free node.
func TestConcurrentWakes(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(24))
	for i := range 200 {
		r := waiting(fmt.Sprintf("run-%03d", i), fmt.Sprintf("pool=%d", i%3))
		r.Priority = []int{50, 20, 80, 50, 100, 0}[i%6] // mixed, and not in arrival order
		env.Submit(r)
	}
	for i := range 10 {
		env.Heartbeat(fmt.Sprintf("node-%d", i), "b1", false, fmt.Sprintf("pool=%d", i%3))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := env.Store.WakeQueued(context.Background(), store.WakeParams{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("wake: %v", err)
	}
	if n := env.Count(`SELECT count(*) FROM leases`); n != 10 {
		t.Fatalf("%d leases over 10 nodes", n)
	}
	if n := env.Count(`SELECT count(*) FROM (SELECT node_id FROM leases GROUP BY node_id HAVING count(*) > 1) x`); n != 0 {
		t.Fatalf("%d nodes leased twice", n)
	}
	if n := env.Count(`SELECT count(*) FROM (SELECT run_id, attempt FROM run_events WHERE to_state = 'RUNNING'
		GROUP BY run_id, attempt HAVING count(*) > 1) x`); n != 0 {
		t.Fatalf("%d runs promoted twice", n)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING'`); n != 10 {
		t.Fatalf("%d running", n)
	}
	// Queue order within each pool (priority, then arrival): the first runs of each got the nodes.
	if n := env.Count(store.RuleSQL(`/* test */ SELECT count(*) FROM runs r WHERE r.state = 'QUEUED' AND EXISTS (
		SELECT 1 FROM runs o WHERE o.state = 'RUNNING' AND o.shape = r.shape AND {{ahead r o}})`)); n != 0 {
		t.Fatalf("%d queued runs were overtaken by a run behind them in the queue", n)
	}
	if res := env.Wake(); res.Promoted != 0 {
		t.Fatalf("a queued run was left next to a free node: %+v", res)
	}
}

// With no available node, the wake's cost does not depend on the depth of the queue.
func TestWakeIdleCostIsOneQueryAtAnyDepth(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("hold", "board"))
	for i := range 300 {
		env.Submit(apitest.NewRun(fmt.Sprintf("q-%d", i), "board"))
	}
	if res := env.Wake(); res.Walked != 0 || res.Promoted != 0 || res.Sweeps != 1 {
		t.Fatalf("idle wake over 300 queued runs: %+v", res)
	}
}

// A heartbeat renewing its node's advert holds the node's row until it commits; a wake in that
// moment still places a queued run on the node: a wake that locked the node's row would skip
// it as taken and leave the run queued next to an idle node until some later wake.
func TestWakePlacesOnANodeWhoseHeartbeatIsInFlight(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Submit(waiting("r1", "board"))
	env.Heartbeat("A", "b1", false, "board")
	ctx := context.Background()
	tx, err := env.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE nodes SET last_seen_at = now(), advert_expires_at = now() + interval '1 minute' WHERE node_id = 'A'`); err != nil {
		t.Fatal(err)
	}
	if res := env.Wake(); res.Promoted != 1 {
		t.Fatalf("wake beside an in-flight heartbeat: %+v", res)
	}
}

// idleBoards adds n idle nodes labelled board, straight into the table: no wake follows.
func idleBoards(env *apitest.Env, n int) {
	env.Exec(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'board-' || i, '{board}', 'b1', now() + interval '1 hour' FROM generate_series(1, $1::int) i`, n)
}

// A head that needs a busy GPU beside a board must not make every wake read every idle board
// of the lab: the wake reads a bounded view of them. (It read all 600 here, on every wake.)
func TestWakeReadsABoundedViewOfALargeIdleFleet(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	idleBoards(env, 600)
	wide := waiting("board-and-gpu", "board")
	wide.Roles = []wire.NewRole{{Name: "dut", Needs: []string{"board"}}, {Name: "host", Needs: []string{"gpu"}}}
	wide.Steps = []wire.NewStep{{ID: "s", Role: "dut", After: []string{}, Spec: []byte(`{}`)}}
	if r := env.Submit(wide); r.Run.State != wire.Queued {
		t.Fatalf("a run needing a GPU no node has: %s", r.Run.State)
	}
	res := env.Wake()
	if res.Promoted != 0 || res.NodesRead > store.StartNodes+2*store.PerNeed {
		t.Fatalf("wake over 600 idle boards for a head that cannot go: %+v", res)
	}
}

// A queue longer than the view one sweep reads is still placed whole, by further sweeps.
func TestWakePlacesAQueueLongerThanItsView(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	const runs = 3 * store.StartNodes
	for i := range runs {
		env.Submit(waiting(fmt.Sprintf("q-%03d", i), "board"))
	}
	idleBoards(env, runs+100)
	res := env.Wake()
	if res.Promoted != runs || res.Sweeps < 2 || env.Count(`SELECT count(*) FROM runs WHERE state = 'QUEUED'`) != 0 {
		t.Fatalf("wake of %d queued runs onto %d idle boards: %+v", runs, runs+100, res)
	}
	env.CheckInvariants()
}

// The wake's first statement finds each shape's head by index lookups at any depth: planned
// at 10,000 queued runs, it must not scan or hash the queued runs (or their roles) to join the
// heads, or an idle wake would cost far more there than at a depth where the planner looks
// them up.
func TestWakeStartLooksHeadsUp(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Exec(`INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts)
		SELECT 'q-' || i, 'q-' || i, 'client:c', 'QUEUED', '\x00', '[["board"]]', 1, 1 FROM generate_series(1, 10000) i;
		INSERT INTO run_roles (run_id, role, ordinal, needs) SELECT 'q-' || i, 'main', 0, '{board}' FROM generate_series(1, 10000) i;
		ANALYZE runs; ANALYZE run_roles`)
	var plan string
	rows, err := env.Store.Pool().Query(context.Background(), "EXPLAIN "+store.WakeStartSQL(env.Store))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan += line + "\n"
	}
	if strings.Contains(plan, "Seq Scan on runs") || strings.Contains(plan, "Seq Scan on run_roles") {
		t.Fatalf("the wake's start reads the whole queue:\n%s", plan)
	}
}

// One wake stops after MaxWakeSweeps sweeps however much is left to place, so its handler
// answers; the next wake places the rest.
func TestAWakeMakesBoundedSweeps(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	const runs = (store.MaxWakeSweeps + 1) * store.StartNodes
	for i := range runs {
		env.Submit(waiting(fmt.Sprintf("q-%03d", i), "board"))
	}
	idleBoards(env, runs+100)
	first := env.Wake()
	if first.Sweeps != store.MaxWakeSweeps || first.Promoted != store.MaxWakeSweeps*store.StartNodes {
		t.Fatalf("first wake of %d queued runs onto %d idle boards: %d sweeps, %d promoted", runs, runs+100, first.Sweeps, first.Promoted)
	}
	if second := env.Wake(); second.Promoted != runs-first.Promoted || env.Count(`SELECT count(*) FROM runs WHERE state = 'QUEUED'`) != 0 {
		t.Fatalf("second wake: %d promoted", second.Promoted)
	}
	env.CheckInvariants()
}

// A run needing a board and the one free GPU is placed even when the wake's first read of a
// crowd of idle boards did not include the GPU: it reads the nodes per need and walks again.
func TestWakeFindsTheRareNodeAmongACrowd(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	wide := waiting("board-and-gpu", "board")
	wide.Roles = []wire.NewRole{{Name: "dut", Needs: []string{"board"}}, {Name: "host", Needs: []string{"gpu"}}}
	wide.Steps = []wire.NewStep{{ID: "s", Role: "dut", After: []string{}, Spec: []byte(`{}`)}}
	env.Submit(wide)
	idleBoards(env, 2*store.StartNodes)
	env.Exec(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at) VALUES ('gpu-1', '{gpu}', 'b1', now() + interval '1 hour')`)
	if res := env.Wake(); res.Promoted != 1 || !slices.Contains(res.Placed, "gpu-1") {
		t.Fatalf("wake of a run for a board and the one GPU: %+v", res)
	}
}

// The wake's first statement runs on every handler call; it takes no parameters, so each
// connection plans it once and keeps that plan. (With a parameter, the starvation bound say,
// PostgreSQL would plan it afresh on many calls, and its planning costs several times its
// work.)
func TestWakeStartKeepsOnePlan(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(1))
	env.Heartbeat("A", "b1", false, "board")
	env.Submit(apitest.NewRun("hold", "board"))
	env.Submit(apitest.NewRun("queued", "board"))
	for range 8 {
		env.Wake()
	}
	var generic, custom int
	if err := env.Store.Pool().QueryRow(context.Background(), `SELECT generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '%/* wake: start */%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if custom != 0 || generic < 8 {
		t.Fatalf("wake start: %d custom plans, %d runs of the generic plan", custom, generic)
	}
}

// A run queued between a submit's match and its insert is not overtaken: the insert sees the
// queue and stores the new run QUEUED too, holding nothing, and the wake decides.
func TestSubmitDoesNotOvertakeARunQueuedAfterItsMatch(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Heartbeat("B", "b1", false, "board")
	env.Submit(apitest.NewRun("hold", "board")) // one of the two boards
	env.Exec(`UPDATE nodes SET draining = true WHERE node_id <> (SELECT node_id FROM leases)`)
	if r := env.Submit(apitest.NewRun("older", "board")); r.Run.State != wire.Queued {
		t.Fatalf("older, with both boards taken or draining: %s", r.Run.State)
	}
	env.Exec(`UPDATE nodes SET draining = false`)
	ctx := context.Background()
	var free string
	if err := env.Store.Pool().QueryRow(ctx, `SELECT node_id FROM free_nodes`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	state, err := env.Store.InsertPlaced(ctx, apitest.NewRun("younger", "board"), map[string]string{"main": free})
	if err != nil || state != wire.Queued {
		t.Fatalf("younger, matched before older queued: %s, %v", state, err)
	}
	if n := env.Count(`SELECT count(*) FROM leases WHERE run_id = 'younger'`); n != 0 {
		t.Fatalf("younger holds %d leases", n)
	}
	env.Wake()
	if env.State("older") != wire.Running || env.State("younger") != wire.Queued {
		t.Fatalf("after the wake: older %s, younger %s", env.State("older"), env.State("younger"))
	}
	env.CheckInvariants()
}

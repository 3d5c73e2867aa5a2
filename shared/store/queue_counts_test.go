package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Queue positions and the queue view are read from per-bucket counts (queue_counts) that the
// writers append to and the reaper folds. These tests compare them with the runs themselves.

// seedSpreadQueue writes n queued runs straight into the tables, arriving over three hours at
// uneven gaps (several in one second, seconds and minutes skipped), at three priorities and in
// two shapes, so every grain of the counts is exercised.
func seedSpreadQueue(t *testing.T, env *apitest.Env, n int) {
	t.Helper()
	env.Exec(`
		INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, priority, created_at)
		SELECT 'seed-' || lpad(i::text, 5, '0'), 'seed-' || lpad(i::text, 5, '0'), 'client:t', 'QUEUED', '\x00',
		       CASE WHEN i % 4 = 0 THEN '[["big","board"]]' ELSE '[["board"]]' END, 1, 1,
		       (ARRAY[10, 50, 90])[1 + i % 3],
		       now() - interval '3 hours' + (i * i % 10800) * interval '1 second' + (i % 7) * interval '1 millisecond'
		FROM generate_series(1, $1::int) i`, n)
	env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs)
		SELECT run_id, 'main', 0, CASE WHEN shape = '[["board"]]' THEN '{board}' ELSE '{big,board}' END::text[]
		FROM runs WHERE run_id LIKE 'seed-%'`)
	env.Exec(`INSERT INTO steps (run_id, step_id, role, ordinal) SELECT run_id, 's1', 'main', 0 FROM runs WHERE run_id LIKE 'seed-%'`)
	env.Exec(`INSERT INTO run_events (run_id, attempt, kind, to_state) SELECT run_id, 1, 'submitted', 'QUEUED' FROM runs WHERE run_id LIKE 'seed-%'`)
}

// positionAndCount reads, in one snapshot, a run's queue_position (the counts) and a count of
// the queued runs ahead of it (the runs): they must agree whatever commits around the read.
var (
	positionSQL = store.RuleSQL(`/* test */ SELECT {{queue_position r}} FROM runs r WHERE r.run_id = $1`)
	aheadSQL    = store.RuleSQL(`/* test */ SELECT count(*) FROM runs q, runs r
		WHERE r.run_id = $1 AND r.state = {{QUEUED}} AND q.state = {{QUEUED}} AND {{ahead q r}}`)
)

func positionAndCount(ctx context.Context, pool interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, runID string) (position *int, counted int, err error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback(ctx)
	if err := tx.QueryRow(ctx, positionSQL, runID).Scan(&position); err != nil {
		return nil, 0, err
	}
	err = tx.QueryRow(ctx, aheadSQL, runID).Scan(&counted)
	return position, counted, err
}

func TestQueuePositionsAreExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(24))
	ctx := context.Background()
	const seeded = 2000
	seedSpreadQueue(t, env, seeded)
	seedID := func(r *rand.Rand) string { return fmt.Sprintf("seed-%05d", 1+r.IntN(seeded)) }

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	work := func(name string, n int, fn func(r *rand.Rand, i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(len(name)), uint64(n)))
			for i := range n {
				if err := fn(r, i); err != nil {
					errs <- fmt.Errorf("%s %d: %w", name, i, err)
					return
				}
			}
		}()
	}
	for w := range 4 { // submits, queued behind the seeded runs, at several priorities
		work(fmt.Sprintf("submit%d", w), 40, func(r *rand.Rand, i int) error {
			run := apitest.NewRun(fmt.Sprintf("new-%d-%d", w, i), "board")
			run.Priority, run.WaitForCapacity = []int{0, 50, 100}[r.IntN(3)], true
			_, err := env.Store.Submit(ctx, run)
			return err
		})
	}
	// Promotions: each new node takes the head of the board queue.
	work("promote", 40, func(r *rand.Rand, i int) error {
		if _, err := env.Store.Heartbeat(ctx, wire.Heartbeat{NodeID: fmt.Sprintf("n%d", i), BootID: "b",
			Labels: []string{"board"}}); err != nil {
			return err
		}
		_, err := env.Store.WakeQueued(ctx, store.WakeParams{})
		return err
	})
	work("cancel", 60, func(r *rand.Rand, i int) error {
		_, err := env.Store.Cancel(ctx, store.CancelParams{Run: store.RunRef{Name: seedID(r), Viewer: store.Viewer{Admin: true}}})
		if errors.As(err, new(*store.RunNotLiveError)) {
			return nil
		}
		return err
	})
	work("priority", 60, func(r *rand.Rand, i int) error {
		_, err := env.Store.SetPriority(ctx, store.RunRef{Name: seedID(r), Viewer: store.Viewer{Admin: true}}, r.IntN(101))
		if errors.Is(err, store.ErrRunNotQueued) {
			return nil
		}
		return err
	})
	work("fold", 10, func(r *rand.Rand, i int) error {
		_, err := env.Store.Reap(ctx, store.ReapParams{})
		return err
	})
	for w := range 4 {
		work(fmt.Sprintf("read%d", w), 60, func(r *rand.Rand, i int) error {
			id := seedID(r)
			position, counted, err := positionAndCount(ctx, env.Store.Pool(), id)
			if err == nil && position != nil && *position != counted {
				err = fmt.Errorf("%s: queue_position %d, %d runs ahead", id, *position, counted)
			}
			return err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	env.CheckInvariants()
	checkQueueReads(t, env)
	env.Reap() // folded: one row per bucket, and the same answers
	if n := env.Count(`SELECT count(*) FROM (SELECT 1 FROM queue_counts GROUP BY shape, queue_rank, span, bucket HAVING count(*) > 1) m`); n != 0 {
		t.Errorf("%d buckets left unfolded", n)
	}
	env.CheckInvariants()
	checkQueueReads(t, env)
}

// checkQueueReads compares every queued run's position (GET and the list) and the queue view
// with the queue as the runs table has it.
func checkQueueReads(t *testing.T, env *apitest.Env) {
	t.Helper()
	ctx := context.Background()
	rows, _ := env.Store.Pool().Query(ctx, store.RuleSQL(`/* test */ SELECT r.run_id, r.shape, r.owner, r.priority
		FROM runs r WHERE r.state = {{QUEUED}} ORDER BY {{queue_order r}}`))
	type queued struct {
		ID, Shape, Owner string
		Priority         int
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[queued])
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("nothing left queued: the test checks nothing")
	}
	admin := store.Viewer{Admin: true}
	for want, q := range all {
		run, err := env.Store.GetRun(ctx, store.RunRef{Name: q.ID, Viewer: admin})
		if err != nil || run.QueuePosition == nil || *run.QueuePosition != want {
			t.Fatalf("%s: position %s (%v), want %d", q.ID, showPosition(run.QueuePosition), err, want)
		}
	}
	listed := map[string]int{}
	p := store.ListRunsParams{Viewer: admin, State: wire.Queued, Limit: 100}
	for {
		page, next, err := env.Store.ListRuns(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			listed[r.RunID] = *r.QueuePosition
		}
		if next == nil {
			break
		}
		p.After = next
	}
	for want, q := range all {
		if listed[q.ID] != want {
			t.Fatalf("%s: listed at %d, want %d", q.ID, listed[q.ID], want)
		}
	}

	queue, err := env.Store.Queue(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	view := queue.Queue
	type summary struct {
		queued     int
		priorities map[int]int
	}
	want := map[string]*summary{}
	for _, q := range all {
		s := want[q.Shape]
		if s == nil {
			s = &summary{priorities: map[int]int{}}
			want[q.Shape] = s
		}
		s.queued++
		s.priorities[q.Priority]++
	}
	if len(view) != len(want) {
		t.Fatalf("queue view has %d shapes, want %d", len(view), len(want))
	}
	for _, e := range view {
		shape := store.Shape([]wire.NewRole{{Needs: e.Needs[0]}})
		s := want[shape]
		if s == nil || e.Queued != s.queued {
			t.Fatalf("%s: %d queued in the view, want %+v", shape, e.Queued, s)
		}
		var prios []int
		for _, pc := range e.Priorities {
			if s.priorities[pc.Priority] != pc.Queued {
				t.Fatalf("%s priority %d: %d in the view, want %d", shape, pc.Priority, pc.Queued, s.priorities[pc.Priority])
			}
			prios = append(prios, pc.Priority)
		}
		if len(prios) != len(s.priorities) || !slices.IsSortedFunc(prios, func(a, b int) int { return b - a }) {
			t.Fatalf("%s: priorities %v, want each of %v once, highest first", shape, prios, s.priorities)
		}
		var oldest string
		if err := env.Store.Pool().QueryRow(ctx, store.RuleSQL(`/* test */ SELECT r.run_id FROM runs r
			WHERE r.state = {{QUEUED}} AND r.shape = $1 ORDER BY {{arrival r}} LIMIT 1`), shape).Scan(&oldest); err != nil {
			t.Fatal(err)
		}
		if e.OldestRunID != oldest {
			t.Fatalf("%s: oldest %s in the view, want %s", shape, e.OldestRunID, oldest)
		}
	}
}

// TestQueueCountsFollowEveryWrite: the counts are kept by a trigger on runs, so a write
// that moves a run into or out of the queue without the store — an operator's UPDATE —
// keeps them too.
func TestQueueCountsFollowEveryWrite(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	seedSpreadQueue(t, env, 50)
	env.Exec(`UPDATE runs SET priority = 100 WHERE run_id = 'seed-00007'`)
	env.Exec(`UPDATE runs SET created_at = now() - interval '100 days' WHERE run_id = 'seed-00009'`)
	env.Exec(`UPDATE steps SET state = 'SKIPPED', finished_at = now() WHERE run_id = 'seed-00011';
		UPDATE runs SET state = 'FAILED', reason = 'queue_timeout', finished_at = now() WHERE run_id = 'seed-00011';
		INSERT INTO run_events (run_id, attempt, kind, from_state, to_state) VALUES ('seed-00011', 1, 'queue_timeout', 'QUEUED', 'FAILED')`)
	env.CheckInvariants()
	checkQueueReads(t, env)
}

func showPosition(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

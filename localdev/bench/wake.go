package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"mediator/localdev/pgcount"
	"mediator/shared/auth"
	"mediator/shared/store"
)

// wakes measures one WakeQueued at queue depths 0, 1,000, 10,000 and 100,000: with no node
// free, with one free node that no queued run fits, and with one free node that the head of
// the queue takes (the run is put back between calls, so every call places one).
func (b *bench) wakes(ctx context.Context) error {
	seeded := 0
	for _, depth := range []int{0, 1000, 10000, 100000} {
		if err := b.seedQueue(ctx, seeded, depth); err != nil {
			return err
		}
		seeded = depth
		for _, c := range []struct {
			name, labels string
			places       int
		}{
			{"no node free", "", 0},
			{"one node free, nothing fits", "other", 0},
			{"one node free, places the head", "wake", 1},
		} {
			if err := b.exec(ctx, `DELETE FROM nodes WHERE node_id = 'wake-node'`); err != nil {
				return err
			}
			if c.labels != "" {
				if err := b.exec(ctx, fmt.Sprintf(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
					VALUES ('wake-node', ARRAY['%s'], 'b1', now() + interval '1 day')`, c.labels)); err != nil {
					return err
				}
			}
			s := &samples{}
			for range 200 {
				cctx, counted := pgcount.WithCall(ctx)
				start := time.Now()
				res, err := b.stack.Store.WakeQueued(cctx, store.WakeParams{})
				took := time.Since(start)
				if err != nil {
					return err
				}
				if want := min(c.places, depth); res.Promoted != want {
					return fmt.Errorf("depth %d, %s: promoted %d, want %d", depth, c.name, res.Promoted, want)
				}
				n := counted.Read()
				s.add(call{took: took, queries: n.Queries, txs: n.Txs})
				if res.Promoted > 0 {
					if err := b.requeue(ctx); err != nil {
						return err
					}
				}
			}
			target := ""
			switch {
			case c.places == 0 && depth == 100000:
				target = "same as at 0"
			case c.places == 1 && depth == 10000:
				target = verdict(s.pct(0.5) < 5*time.Millisecond, "median < 5 ms")
			}
			b.wakeRows = append(b.wakeRows, wakeRow{depth: depth, name: c.name, s: s})
			b.add(latencyRow(fmt.Sprintf("WakeQueued, %s queued: %s", thousands(depth), c.name), "", s, target))
		}
	}
	b.judgeIdleWake()
	if err := b.queueReads(ctx, seeded); err != nil {
		return err
	}
	// The rest of the benchmark starts from an empty queue — and from vacuumed indexes: a
	// hundred thousand runs leaving the queue at once leave as many dead entries in its
	// partial indexes, which every later "is anything queued?" would walk until autovacuum came.
	if err := b.setup(ctx, `UPDATE steps SET state = 'SKIPPED', finished_at = now() WHERE run_id LIKE 'w-%' AND state = 'PENDING';
		UPDATE runs SET state = 'FAILED', reason = 'queue_timeout', finished_at = now() WHERE run_id LIKE 'w-%' AND state = 'QUEUED'`); err != nil {
		return err
	}
	return b.vacuum(ctx)
}

// queueReads times, while depth runs are queued, what a user asks of a deep queue through the
// handlers: where a run near the tail stands (GET /v1/runs/{id}, whose answer counts the runs
// ahead of it), and the queue by kind (GET /v1/queue, as an admin). Both read the counts the
// queue keeps per minute and second of arrival, which the reaper folds each minute: the reads
// are timed as the submits left them, then after the reaper's sweep.
func (b *bench) queueReads(ctx context.Context, depth int) error {
	tail := fmt.Sprintf("w-%07d", depth-10)
	owner := auth.Principal{Kind: auth.Client, ID: "bench"} // the seeded runs' owner
	admin := auth.Principal{Kind: auth.Admin, ID: "bench"}
	var fleet int
	if err := b.stack.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM nodes`).Scan(&fleet); err != nil {
		return err
	}
	for _, folded := range []bool{false, true} {
		if folded {
			if err := b.reapOnce(ctx); err != nil {
				return err
			}
		}
		position, view := &samples{}, &samples{}
		var run struct {
			Run struct {
				QueuePosition *int `json:"queue_position"`
			} `json:"run"`
		}
		for range 50 {
			c := b.do(ctx, owner, "GET", "/v1/runs/"+tail, nil)
			if err := json.Unmarshal(c.body, &run); err != nil || c.status != 200 || run.Run.QueuePosition == nil ||
				*run.Run.QueuePosition < depth*9/10 {
				return fmt.Errorf("GET /v1/runs/%s with %d queued: %d %s", tail, depth, c.status, c.body)
			}
			position.add(c)
			if c = b.do(ctx, admin, "GET", "/v1/queue", nil); c.status != 200 {
				return fmt.Errorf("GET /v1/queue: %d %s", c.status, c.body)
			}
			view.add(c)
		}
		state, key := "after the reaper's fold and a vacuum", ""
		if !folded {
			state, key = "as the submits left the counts", "_unfolded"
		}
		b.figure("queue_position_ms_at_100k"+key, msOf(position.pct(0.5)))
		b.figure("queue_view_ms_at_100k"+key, msOf(view.pct(0.5)))
		b.figure("queue_position_at_100k", float64(*run.Run.QueuePosition))
		b.figure("queue_view_fleet_nodes", float64(fleet))
		b.add(latencyRow(fmt.Sprintf("GET /v1/runs/{id}, %s queued, %s: queue_position %s", thousands(depth), state, thousands(*run.Run.QueuePosition)),
			"", position, verdict(position.pct(0.5) <= 5*time.Millisecond, "median ≤ 5 ms")))
		b.add(latencyRow(fmt.Sprintf("GET /v1/queue (admin), %s queued, %s; nodes in the fleet: %d", thousands(depth), state, fleet),
			"", view, verdict(view.pct(0.5) <= 20*time.Millisecond, "median ≤ 20 ms")))
	}
	return nil
}

// reapOnce runs the reaper's sweep, which also folds the queue's counts, then vacuums the
// counts as autovacuum does soon after a fold (the table's thresholds are set low for that):
// until then a read walks the folded rows' dead index entries. The wake node is free: the
// sweep's wake places the head on it, and it is put back.
func (b *bench) reapOnce(ctx context.Context) error {
	sum, err := b.stack.Store.Reap(ctx, store.ReapParams{})
	if err != nil {
		return err
	}
	if sum.Promoted+sum.Stranded > 0 {
		if err := b.requeue(ctx); err != nil {
			return err
		}
	}
	return b.exec(ctx, `VACUUM (ANALYZE) queue_counts`)
}

// vacuum does what the reaper and autovacuum would between sections, so no section pays for
// the last one's churn: the reaper's sweep folds the queue's counts (left unfolded, the
// hundreds of thousands of rows a section's queue leaves are summed by every later queued
// submit's queue_position), then everything is vacuumed.
func (b *bench) vacuum(ctx context.Context) error {
	if _, err := b.stack.Store.Reap(ctx, store.ReapParams{}); err != nil {
		return err
	}
	return b.exec(ctx, `VACUUM (ANALYZE) runs, run_roles, steps, leases, nodes, free_nodes, run_events, queue_counts`)
}

// judgeIdleWake compares each wake that places nothing at 100,000 queued with the same at 0.
func (b *bench) judgeIdleWake() {
	median := func(depth int, name string) time.Duration {
		for _, w := range b.wakeRows {
			if w.name == name && w.depth == depth {
				return w.s.pct(0.5)
			}
		}
		return 0
	}
	for i, r := range b.rows {
		if r.target != "same as at 0" {
			continue
		}
		name := strings.TrimPrefix(r.measure, "WakeQueued, 100,000 queued: ")
		at0, at100k := median(0, name), median(100000, name)
		b.rows[i].target = verdict(at100k < at0*2+200*time.Microsecond, fmt.Sprintf("same as at 0 (%s)", ms(at0)))
	}
}

type wakeRow struct {
	depth int
	name  string
	s     *samples
}

// seedQueue writes queued runs from..to straight into the tables: the benchmark measures the
// wake, not a hundred thousand submits. It is setup, not a request: the request's statement
// timeout does not bound it.
func (b *bench) seedQueue(ctx context.Context, from, to int) error {
	if to <= from {
		return nil
	}
	return b.setup(ctx, fmt.Sprintf(`
		INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, created_at)
		SELECT 'w-' || lpad(i::text, 7, '0'), 'w-' || lpad(i::text, 7, '0'), 'client:bench', 'QUEUED', '\x00', '[["wake"]]', 1, 1000000,
		       now() - interval '1 hour' + i * interval '1 millisecond'
		FROM generate_series(%[1]d + 1, %[2]d) i;
		INSERT INTO run_roles (run_id, role, ordinal, needs)
		SELECT 'w-' || lpad(i::text, 7, '0'), 'main', 0, '{wake}' FROM generate_series(%[1]d + 1, %[2]d) i;
		INSERT INTO steps (run_id, step_id, role, ordinal)
		SELECT 'w-' || lpad(i::text, 7, '0'), 's1', 'main', 0 FROM generate_series(%[1]d + 1, %[2]d) i;
		ANALYZE runs; ANALYZE run_roles; ANALYZE steps`, from, to))
}

// requeue puts the placed run back at the head of the queue, as if it had lost its node.
func (b *bench) requeue(ctx context.Context) error {
	return b.exec(ctx, `
		WITH l AS (DELETE FROM leases WHERE node_id = 'wake-node' RETURNING run_id),
		     r AS (UPDATE runs SET state = 'QUEUED', started_at = NULL, deadline_at = NULL, attempt = attempt + 1
		           WHERE run_id IN (SELECT run_id FROM l) RETURNING run_id)
		UPDATE run_roles SET node_id = '' WHERE run_id IN (SELECT run_id FROM r)`)
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

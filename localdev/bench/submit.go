package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"mediator/shared/auth"
)

const clients = 8

// submits measures POST /v1/runs from 8 concurrent clients: placed at once (201), then queued
// behind a busy pool (202).
func (b *bench) submits(ctx context.Context) error {
	// 201: a lab of 2,000 identical boards, every run placed on a free one, until 1,900 are
	// held: each submit matches against every capable node still free.
	if err := b.exec(ctx, `INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'board-' || i, ARRAY['board'], 'b1', now() + interval '1 day' FROM generate_series(1, 2000) i`); err != nil {
		return err
	}
	if err := b.vacuum(ctx); err != nil {
		return err
	}
	placed := &samples{}
	cpu := cpuBusy()
	n, took, queuedToo, err := b.submitFor(ctx, placed, 201, 1900, func(c, i int) map[string]any {
		return oneStep(fmt.Sprintf("p%d-%d", c, i), "board")
	})
	if err != nil {
		return err
	}
	rate := float64(n) / took.Seconds()
	b.rate("submit 201", rate)
	b.figure("submit_201_runs_per_s", rate)
	title := "submit → 201 RUNNING (8 clients)"
	if queuedToo > 0 {
		title = fmt.Sprintf("submit → 201 RUNNING (8 clients; %d of %d answered 202: queued on losing a board to a concurrent submit, or when the runs queued so needed every free board, then placed by the wake)", queuedToo, n)
	}
	b.add(latencyRow(title, perSec(rate, "runs")+", "+cpuPer(cpu, int64(n)), placed,
		verdict(placed.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))

	// 202: a pool of 50 nodes, all held; every submit finds capable nodes, all busy.
	if err := b.exec(ctx, `INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'pool-' || i, ARRAY['pool'], 'b1', now() + interval '1 day' FROM generate_series(1, 50) i`); err != nil {
		return err
	}
	for i := range 50 {
		if c := b.do(ctx, client(0), "POST", "/v1/runs", oneStep(fmt.Sprintf("hold-%d", i), "pool")); c.status != 201 {
			return fmt.Errorf("holding the pool: %d %s", c.status, c.body)
		}
	}
	queued := &samples{}
	cpu = cpuBusy()
	n, took, _, err = b.submitFor(ctx, queued, 202, 0, func(c, i int) map[string]any {
		return oneStep(fmt.Sprintf("q%d-%d", c, i), "pool")
	})
	if err != nil {
		return err
	}
	rate = float64(n) / took.Seconds()
	b.rate("submit 202", rate)
	b.figure("submit_202_runs_per_s", rate)
	b.add(latencyRow(fmt.Sprintf("submit → 202 QUEUED (8 clients, queue 0→%d)", n), perSec(rate, "runs")+", "+cpuPer(cpu, int64(n)), queued,
		verdict(queued.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	// The sections after it bring fleets of their own: the boards and the pool leave.
	return b.endAll(ctx)
}

// endAll ends every unfinished run and removes the fleet, so the next section starts from
// nothing.
func (b *bench) endAll(ctx context.Context) error {
	if err := b.exec(ctx, `UPDATE steps SET state = 'SKIPPED', finished_at = now() WHERE state IN ('PENDING', 'RUNNING');
		DELETE FROM leases; UPDATE runs SET state = 'FAILED', reason = 'cancelled', finished_at = now(), deadline_at = NULL
		WHERE state IN ('QUEUED', 'RUNNING'); DELETE FROM nodes`); err != nil {
		return err
	}
	return b.vacuum(ctx)
}

// submitFor has 8 clients submit for the section's length, or until limit submits (0: no
// limit); every answer must be want, except that a 202 may stand for a 201: a submit that lost
// its chosen node to a concurrent one is stored QUEUED, by design, and the runs after it queue
// behind it until the wake places them. It returns how many, how long they took, and how many
// of them were such 202s.
func (b *bench) submitFor(ctx context.Context, s *samples, want, limit int, body func(client, i int) map[string]any) (int, time.Duration, int, error) {
	var wg sync.WaitGroup
	var done, queued atomic.Int64
	var bad atomic.Value
	began := time.Now()
	end := began.Add(b.dur)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				if limit > 0 && done.Add(1) > int64(limit) {
					return
				}
				res := b.do(ctx, client(c), "POST", "/v1/runs", body(c, i))
				if res.status == 202 && want == 201 {
					queued.Add(1)
				} else if res.status != want {
					bad.Store(fmt.Sprintf("submit answered %d, want %d: %s", res.status, want, res.body))
					return
				}
				s.add(res)
				if limit == 0 {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	if msg, ok := bad.Load().(string); ok {
		return 0, took, 0, fmt.Errorf("%s", msg)
	}
	return s.n(), took, int(queued.Load()), nil
}

func client(i int) auth.Principal {
	return auth.Principal{Kind: auth.Client, ID: fmt.Sprintf("bench-%d", i)}
}

func oneStep(id, need string) map[string]any {
	return map[string]any{"run_id": id, "needs": []string{need}, "steps": []map[string]any{{"id": "s1", "spec": map[string]any{"cmd": "true"}}}}
}

func (b *bench) exec(ctx context.Context, sql string) error {
	_, err := b.admin.Exec(ctx, sql)
	return err
}

// setup runs sql in one transaction without the statement timeout the pool's connections
// carry for requests: the bench's bulk writes are not requests.
func (b *bench) setup(ctx context.Context, sql string) error {
	tx, err := b.admin.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

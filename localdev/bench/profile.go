package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// profiler sums time per statement when BENCH_PROFILE is set: where a section's database time
// goes, to find what to make faster. The client side is wall time per round trip (waits
// included); the server side is pg_stat_statements' execution time (statementSettings).
type profiler struct {
	mu    sync.Mutex
	stats map[string]*stat
	pool  *pgxpool.Pool
}

func profiling() bool { return os.Getenv("BENCH_PROFILE") != "" }

func (p *profiler) reset(ctx context.Context) {
	if !profiling() {
		return
	}
	if _, err := p.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Println("  (no server-side profile:", err, ")")
	}
}

// serverReport prints where the server spent its execution time.
func (p *profiler) serverReport(ctx context.Context) {
	rows, err := p.pool.Query(ctx, `SELECT calls, total_exec_time, mean_exec_time, plans::float8 / greatest(calls, 1), total_plan_time, shared_blks_hit + shared_blks_read,
		left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return
	}
	defer rows.Close()
	fmt.Println("  server side (calls, total exec, mean exec, plans per call, total planning, buffers per call)")
	for rows.Next() {
		var calls, blks int64
		var total, mean, plan, planning float64
		var q string
		if rows.Scan(&calls, &total, &mean, &plan, &planning, &blks, &q) == nil {
			fmt.Printf("    %6d %9.0fms %7.3fms plans/call %5.2f %7.0fms %7.0f  %s\n", calls, total, mean, plan, planning, float64(blks)/float64(max(calls, 1)), q)
		}
	}
}

type stat struct {
	n     int
	total time.Duration
}

type startKey struct{}

func (p *profiler) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, startKey{}, [2]any{time.Now(), d.SQL})
}

func (p *profiler) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	p.record(ctx)
}

// A pipelined batch is one round trip: it is timed as one, named by its statements.
func (p *profiler) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	names := make([]string, 0, len(d.Batch.QueuedQueries))
	for _, q := range d.Batch.QueuedQueries {
		names = append(names, strings.Fields(q.SQL)[0])
	}
	return context.WithValue(ctx, startKey{}, [2]any{time.Now(), "batch: " + strings.Join(names, " ")})
}

func (p *profiler) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (p *profiler) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	p.record(ctx)
}

func (p *profiler) record(ctx context.Context) {
	v, ok := ctx.Value(startKey{}).([2]any)
	if !ok {
		return
	}
	key := strings.Join(strings.Fields(v[1].(string)), " ")
	if len(key) > 90 {
		key = key[:90]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats == nil {
		p.stats = map[string]*stat{}
	}
	s := p.stats[key]
	if s == nil {
		s = &stat{}
		p.stats[key] = s
	}
	s.n++
	s.total += time.Since(v[0].(time.Time))
}

func (p *profiler) report(ctx context.Context, section string) {
	if !profiling() {
		return
	}
	defer p.serverReport(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	type line struct {
		key string
		s   *stat
	}
	var lines []line
	for k, s := range p.stats {
		lines = append(lines, line{k, s})
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].s.total > lines[j].s.total })
	fmt.Printf("  profile of %s (statement: count, total, mean)\n", section)
	for i, l := range lines {
		if i == 12 {
			break
		}
		fmt.Printf("    %6d %9.0fms %7.2fms  %s\n", l.s.n, float64(l.s.total.Milliseconds()), float64(l.s.total.Microseconds())/1000/float64(l.s.n), l.key)
	}
	p.stats = nil
}

// tracers sends every statement to each tracer.
type tracers []pgx.QueryTracer

func (t tracers) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	for _, tr := range t {
		ctx = tr.TraceQueryStart(ctx, c, d)
	}
	return ctx
}

func (t tracers) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	for _, tr := range t {
		tr.TraceQueryEnd(ctx, c, d)
	}
}

func (t tracers) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, tr := range t {
		if b, ok := tr.(pgx.BatchTracer); ok {
			ctx = b.TraceBatchStart(ctx, c, d)
		}
	}
	return ctx
}

func (t tracers) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	for _, tr := range t {
		if b, ok := tr.(pgx.BatchTracer); ok {
			b.TraceBatchQuery(ctx, c, d)
		}
	}
}

func (t tracers) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	for _, tr := range t {
		if b, ok := tr.(pgx.BatchTracer); ok {
			b.TraceBatchEnd(ctx, c, d)
		}
	}
}

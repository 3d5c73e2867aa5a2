package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// sampleEvery is how often watchPostgres looks at what Mediator's backends are doing: often
// enough for a minute to give a thousand looks, seldom enough to cost the server nothing
// it would notice.
const sampleEvery = 50 * time.Millisecond

// pgWindow is what PostgreSQL did in a window besides running the statements: the tail's
// suspects — checkpoints, autovacuum, backends waiting — and the statements' worst times.
type pgWindow struct {
	checkpoints int64
	sessions    int64                 // connections opened to Mediator's database
	tables      map[string]tableCount // by table: what changed in the window
	looks       int                   // samples of pg_stat_activity
	waits       map[string]int        // active backends seen, by wait event ("CPU" for none)
	slowest     map[string]float64
	plannedBeat float64 // the share of heartbeat statements planned afresh
}

// watchPostgres starts looking at Mediator's backends until `until`, and returns what reads the
// window's figures at its end, given that moment's reading of the statements.
func (b *bench) watchPostgres(ctx context.Context, until time.Time) (func(context.Context, statementsByTag) (pgWindow, error), error) {
	checkpoints, err := b.checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	sessions, err := b.sessions(ctx)
	if err != nil {
		return nil, err
	}
	tables, err := b.tableCounts(ctx)
	if err != nil {
		return nil, err
	}
	w := pgWindow{waits: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for next := time.Now(); next.Before(until) && sleepUntil(ctx, next); next = next.Add(sampleEvery) {
			seen, err := b.activeBackends(ctx)
			if err != nil {
				continue
			}
			mu.Lock()
			w.looks++
			for ev, n := range seen {
				w.waits[ev] += n
			}
			mu.Unlock()
		}
	}()
	return func(ctx context.Context, st statementsByTag) (pgWindow, error) {
		wg.Wait()
		now, err := b.checkpoints(ctx)
		if err != nil {
			return w, err
		}
		w.checkpoints = now - checkpoints
		if w.sessions, err = b.sessions(ctx); err != nil {
			return w, err
		}
		w.sessions -= sessions
		after, err := b.tableCounts(ctx)
		if err != nil {
			return w, err
		}
		w.tables = map[string]tableCount{}
		for t, n := range after {
			if d := n.minus(tables[t]); d != (tableCount{}) {
				w.tables[t] = d
			}
		}
		// The longest single execution of each tag, and the share of heartbeats planned
		// afresh (a cached generic plan is not planned again).
		w.slowest = map[string]float64{}
		for tag, t := range st {
			w.slowest[tag] = t.worst
		}
		if beat := st["heartbeat"]; beat.calls > 0 {
			w.plannedBeat = beat.plans / beat.calls
		}
		return w, nil
	}, nil
}

// checkpoints is how many checkpoints the server has made (PostgreSQL 17 counts them in
// pg_stat_checkpointer, earlier ones in pg_stat_bgwriter).
func (b *bench) checkpoints(ctx context.Context) (int64, error) {
	var n int64
	if err := b.admin.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&n); err == nil {
		return n, nil
	}
	err := b.admin.QueryRow(ctx, `SELECT num_timed + num_requested FROM pg_stat_checkpointer`).Scan(&n)
	return n, err
}

// sessions is how many connections Mediator's database has been opened by.
func (b *bench) sessions(ctx context.Context) (int64, error) {
	var n int64
	err := b.admin.QueryRow(ctx, `SELECT sessions FROM pg_stat_database WHERE datname = $1`, b.db).Scan(&n)
	return n, err
}

// tableCount is what the statistics count of a table: autovacuum and autoanalyze runs, rows
// updated, and of them heap-only — an update that finds room on its row's page and changes no
// indexed column writes no index entry (a GIN index's go to its pending list, which a writer
// then has to merge).
type tableCount struct{ maintenance, updated, hot int64 }

func (c tableCount) minus(o tableCount) tableCount {
	return tableCount{c.maintenance - o.maintenance, c.updated - o.updated, c.hot - o.hot}
}

func (b *bench) tableCounts(ctx context.Context) (map[string]tableCount, error) {
	rows, err := b.admin.Query(ctx, `SELECT relname, autovacuum_count + autoanalyze_count, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byTable := map[string]tableCount{}
	for rows.Next() {
		var t string
		var c tableCount
		if err := rows.Scan(&t, &c.maintenance, &c.updated, &c.hot); err != nil {
			return nil, err
		}
		byTable[t] = c
	}
	return byTable, rows.Err()
}

// activeBackends counts Mediator's backends in a transaction now: running a statement, by
// what they wait on, or between two (idle in transaction: the handler's own time, with a
// connection held).
func (b *bench) activeBackends(ctx context.Context) (map[string]int, error) {
	rows, err := b.admin.Query(ctx, `
		SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || '/' || wait_event, 'CPU') ELSE state END, count(*)
		FROM pg_stat_activity
		WHERE datname = $1 AND state IN ('active', 'idle in transaction') AND backend_type = 'client backend'
			AND pid <> pg_backend_pid()
		GROUP BY 1`, b.db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]int{}
	for rows.Next() {
		var ev string
		var n int
		if err := rows.Scan(&ev, &n); err != nil {
			return nil, err
		}
		seen[ev] = n
	}
	return seen, rows.Err()
}

// rows are the table's lines for the window.
func (w pgWindow) rows() []row {
	var vacuums []string
	for t, n := range w.tables {
		if n.maintenance > 0 {
			vacuums = append(vacuums, fmt.Sprintf("%s ×%d", t, n.maintenance))
		}
	}
	sort.Strings(vacuums)
	if len(vacuums) == 0 {
		vacuums = []string{"none"}
	}
	out := []row{{measure: "  · PostgreSQL in the window: connections opened; checkpoints; autovacuum and autoanalyze runs by table",
		value: fmt.Sprintf("%d connections; %d checkpoints; %s", w.sessions, w.checkpoints, strings.Join(vacuums, ", "))}}
	var hot []string
	for _, t := range []string{"nodes", "leases"} {
		if u := w.tables[t]; u.updated > 0 {
			hot = append(hot, fmt.Sprintf("%s %.0f %% of %d", t, 100*float64(u.hot)/float64(u.updated), u.updated))
		}
	}
	if len(hot) > 0 {
		out = append(out, row{measure: "  · rows updated heap-only (HOT: no index entry written), of the tables every heartbeat updates",
			value: strings.Join(hot, ", ")})
	}
	if w.looks > 0 {
		events := make([]string, 0, len(w.waits))
		for ev := range w.waits {
			events = append(events, ev)
		}
		sort.Slice(events, func(i, j int) bool { return w.waits[events[i]] > w.waits[events[j]] })
		var parts []string
		for _, ev := range events[:min(6, len(events))] {
			parts = append(parts, fmt.Sprintf("%s %.2f", ev, float64(w.waits[ev])/float64(w.looks)))
		}
		if len(parts) == 0 {
			parts = []string{"none seen"}
		}
		out = append(out, row{measure: fmt.Sprintf("  · Mediator's backends in a transaction, by wait event or idle in it (pg_stat_activity, %d looks %s apart): backends at a look, on average",
			w.looks, sampleEvery), value: strings.Join(parts, ", ")})
	}
	tags := make([]string, 0, len(w.slowest))
	for t := range w.slowest {
		if t != "" {
			tags = append(tags, t)
		}
	}
	sort.Slice(tags, func(i, j int) bool { return w.slowest[tags[i]] > w.slowest[tags[j]] })
	var worst []string
	for _, t := range tags[:min(5, len(tags))] {
		worst = append(worst, fmt.Sprintf("%s %.1f ms", t, w.slowest[t]))
	}
	out = append(out, row{measure: "  · the slowest single execution, by statement (pg_stat_statements); heartbeats planned afresh",
		value: strings.Join(worst, ", ") + fmt.Sprintf("; %.1f %% of heartbeats planned", 100*w.plannedBeat)})
	return out
}

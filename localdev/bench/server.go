package main

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// statementSettings make the server record every statement's time (pg_stat_statements), which
// the server-time figures read: the bench cluster always starts with them.
//
// The rest trace the tail into the cluster's log (.localdev/pg-bench/postgres.log): every
// statement over 20 ms with its plan (auto_explain), each wait for a lock longer than
// deadlock_timeout, every checkpoint and autovacuum run.
var statementSettings = []string{"shared_preload_libraries=pg_stat_statements,auto_explain", "pg_stat_statements.track=all",
	"pg_stat_statements.track_planning=on", "auto_explain.log_min_duration=20ms", "auto_explain.log_nested_statements=on",
	"log_lock_waits=on", "deadlock_timeout=10ms", "log_checkpoints=on", "log_autovacuum_min_duration=0"}

// checkStatements makes sure the server records statements as the figures need, and learns
// which database is Mediator's (the one whose statements count). A bench
// cluster found running was started without them (by an older bench, or one still running):
// it is not restarted under whoever uses it, the message says how to stop it.
func (b *bench) checkStatements(ctx context.Context) error {
	var libs, track, planning string
	if err := b.admin.QueryRow(ctx, `SELECT current_database(), current_setting('shared_preload_libraries'),
		coalesce(current_setting('pg_stat_statements.track', true), ''),
		coalesce(current_setting('pg_stat_statements.track_planning', true), '')`).Scan(&b.db, &libs, &track, &planning); err != nil {
		return err
	}
	if !strings.Contains(libs, "pg_stat_statements") || track != "all" || planning != "on" {
		where := "the bench cluster is running without them: stop it (from the repository root: go run ./localdev/cmd/mediatorlocal stop bench) and run again"
		if os.Getenv("DATABASE_URL") != "" {
			where = "the server of DATABASE_URL does not run with them"
		}
		return fmt.Errorf("the server-time figures need %s; %s (found shared_preload_libraries=%q, track=%q, track_planning=%q)",
			strings.Join(statementSettings, " "), where, libs, track, planning)
	}
	return b.exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
}

// resetServerTime forgets what database db's statements have cost so far (the other
// databases' statements are kept).
func (b *bench) resetServerTime(ctx context.Context, db string) error {
	_, err := b.admin.Exec(ctx,
		`SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)`, db)
	return err
}

// serverTime is the server's time, in ms, on database db's statements since resetServerTime,
// by statement tag (the /* tag */ the store's statements open with; "" for a statement without
// one, such as BEGIN and COMMIT or pgbench's). It is pg_stat_statements' execution and planning
// time of the top-level statements only: with track=all a trigger's or a SQL function's
// statements are recorded too, nested in the statement that ran them, whose time already
// holds theirs. (A deferred constraint trigger runs at COMMIT, outside any statement: its
// statements are top-level, counted once.) Not in it: parse and bind, the commit itself and
// its WAL flush, waiting on the network or for a connection.
func (b *bench) serverTime(ctx context.Context, db string) (map[string]float64, error) {
	st, err := b.statements(ctx, db)
	return st.times(), err
}

// tagStatements is what pg_stat_statements holds of one tag's top-level statements.
type tagStatements struct {
	ms           float64 // execution and planning, in all
	worst        float64 // the longest single execution
	plans, calls float64
}

// statementsByTag is one reading of pg_stat_statements, by tag.
type statementsByTag map[string]tagStatements

// statements reads database db's top-level statements since resetServerTime, by tag (see
// serverTime).
func (b *bench) statements(ctx context.Context, db string) (statementsByTag, error) {
	rows, err := b.admin.Query(ctx, `
		SELECT coalesce(substring(query FROM '^/\* (.*?) \*/'), ''), sum(total_exec_time + total_plan_time),
			max(max_exec_time), sum(plans)::float8, sum(calls)::float8
		FROM pg_stat_statements
		WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		GROUP BY 1`, db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byTag := statementsByTag{}
	for rows.Next() {
		var tag string
		var t tagStatements
		if err := rows.Scan(&tag, &t.ms, &t.worst, &t.plans, &t.calls); err != nil {
			return nil, err
		}
		byTag[tag] = t
	}
	return byTag, rows.Err()
}

// times is the reading's server time, in ms, by tag.
func (s statementsByTag) times() map[string]float64 {
	byTag := make(map[string]float64, len(s))
	for tag, t := range s {
		byTag[tag] = t.ms
	}
	return byTag
}

// total is the whole of a serverTime reading.
func total(byTag map[string]float64) float64 {
	var sum float64
	for _, ms := range byTag {
		sum += ms
	}
	return sum
}

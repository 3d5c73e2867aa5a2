package store

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

var (
	getRunStmt     = stmt("get_run")
	runHistoryStmt = stmt("run_history")
)

// Viewer is who is reading: a run is visible to its owner and to admins; to anyone else it
// does not exist.
type Viewer struct {
	Owner string
	Admin bool
}

// sees says whether v may see a run of owner's: its owner and admins may.
func (v Viewer) sees(owner string) bool { return v.Admin || owner == v.Owner }

// GetRun reads one run as v may see it.
func (s *Store) GetRun(ctx context.Context, runID string, v Viewer) (Run, error) {
	run, err := getRun(ctx, s.pool, runID)
	if err != nil {
		return Run{}, err
	}
	if !v.sees(run.owner) {
		return Run{}, ErrNotFound
	}
	return run, nil
}

// getRun reads one run, whoever owns it, through q (the pool, or a transaction).
func getRun(ctx context.Context, q querier, runID string) (Run, error) {
	return scanRun(getRunStmt.queryRow(ctx, q, runID))
}

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var roles []struct {
		Name   string   `json:"name"`
		Needs  []string `json:"needs"`
		NodeID string   `json:"node_id"`
	}
	var position *int
	if err := row.Scan(&r.RunID, &r.owner, &r.State, &r.Reason, &r.Priority, &r.Attempt, &r.MaxAttempts, &r.CreatedAt,
		&r.StartedAt, &r.FinishedAt, &r.CancelRequestedAt, &r.CancelReason, &r.TimeoutSeconds,
		&r.QueueTimeoutSeconds, &r.WaitForCapacity, &r.Metadata, &roles, &r.Steps, &position); err != nil {
		return Run{}, err
	}
	r.Roles = map[string]Role{}
	for _, ro := range roles {
		r.Roles[ro.Name] = Role{Needs: ro.Needs, NodeID: ro.NodeID}
		if ro.NodeID != "" {
			if r.Assigned == nil {
				r.Assigned = map[string]string{}
			}
			r.Assigned[ro.Name] = ro.NodeID
		}
	}
	r.QueuePosition = position
	return r, nil
}

// ListRunsParams pages through runs, newest first.
type ListRunsParams struct {
	Viewer Viewer
	State  string // "" for every state
	// Priority, when set, lists only runs of that priority.
	Priority *int
	Limit    int
	After    *Cursor
}

// Cursor is the keyset position of the last run of a page.
type Cursor struct {
	CreatedAtMicros int64
	RunID           string
}

// listRunsSQL is a page of runs, newest first (%s: the filter), with the queue positions of
// its QUEUED runs found once for the page: the queue_position of its first queued run, plus
// each one's rank from there. (Found per run, a page of a hundred queued runs paid for a
// hundred positions.) The filter is built per request: which index serves a page depends on it.
const listRunsSQL = `/* runs: list */
WITH page AS MATERIALIZED (
    SELECT {{run_fields r}} FROM runs r%s
    ORDER BY {{newest_first r}} LIMIT @limit
), queued AS (
    SELECT q.* FROM runs q WHERE q.run_id IN (SELECT run_id FROM page WHERE state = {{QUEUED}})
), lo AS (
    SELECT q.state, q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY {{queue_order q}} LIMIT 1
), hi AS (
    SELECT q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY {{queue_order q}}
    OFFSET (SELECT count(*) - 1 FROM queued) LIMIT 1
), ahead AS (
    SELECT {{queue_position lo}} AS n FROM lo
), ranked AS (
    SELECT q.run_id, row_number() OVER (ORDER BY {{queue_order q}}) - 1 AS rank
    FROM runs q, lo, hi
    WHERE q.state = {{QUEUED}} AND NOT {{ahead q lo}} AND NOT {{ahead hi q}}
)
SELECT p.*, CASE WHEN p.state = {{QUEUED}} THEN (SELECT n FROM ahead) + k.rank END
FROM page p LEFT JOIN ranked k ON k.run_id = p.run_id
ORDER BY {{newest_first p}}`

// listRunsByFilter keeps the list statement of each filter, built on first use.
var listRunsByFilter sync.Map // filter → statement

// ListRuns returns up to Limit runs after the cursor, and the cursor of the next page (nil at
// the end).
func (s *Store) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, *Cursor, error) {
	var where []string
	args := named{"limit": p.Limit + 1}
	if !p.Viewer.Admin {
		where, args["owner"] = append(where, "r.owner = @owner"), p.Viewer.Owner
	}
	if p.State != "" {
		where, args["state"] = append(where, "r.state = @state"), p.State
	}
	if p.Priority != nil {
		where, args["priority"] = append(where, "r.priority = @priority::smallint"), *p.Priority
	}
	if p.After != nil {
		where = append(where, "{{listed_after r}}")
		args["after_us"], args["after_id"] = p.After.CreatedAtMicros, p.After.RunID
	}
	filter := ""
	if len(where) > 0 {
		filter = ` WHERE ` + strings.Join(where, " AND ")
	}
	st, ok := listRunsByFilter.Load(filter)
	if !ok {
		st, _ = listRunsByFilter.LoadOrStore(filter, dynamic("list_runs", fmt.Sprintf(listRunsSQL, filter)))
	}
	list := st.(statement)
	rows, err := list.query(ctx, s.pool, args)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, nil, list.fail(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, list.fail(err)
	}
	var next *Cursor
	if len(runs) > p.Limit {
		runs = runs[:p.Limit]
		last := runs[len(runs)-1]
		next = &Cursor{CreatedAtMicros: last.CreatedAt.UnixMicro(), RunID: last.RunID}
	}
	return runs, next, nil
}

// History is a run's event log, oldest first.
func (s *Store) History(ctx context.Context, runID string) ([]Event, error) {
	return collect(ctx, s.pool, runHistoryStmt, pgx.RowToStructByPos[Event], runID)
}

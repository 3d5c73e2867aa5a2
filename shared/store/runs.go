package store

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

var (
	getRunStmt     = stmt("get_run")
	runHistoryStmt = stmt("run_history")
	listRunsStmt   = stmtToFill("list_runs")
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

// listRunsByFilter keeps the list statement of each filter, written on first use.
var listRunsByFilter sync.Map // filter → statement

// listFilter is a page's conditions on its runs, one listed_* fragment (runs.sql) for each
// parameter given, and the arguments of the whole statement.
func listFilter(p ListRunsParams) (string, named) {
	var where []string
	args := named{"limit": p.Limit + 1}
	if !p.Viewer.Admin {
		where, args["owner"] = append(where, "{{listed_owner r}}"), p.Viewer.Owner
	}
	if p.State != "" {
		where, args["state"] = append(where, "{{listed_state r}}"), p.State
	}
	if p.Priority != nil {
		where, args["priority"] = append(where, "{{listed_priority r}}"), *p.Priority
	}
	if p.After != nil {
		where = append(where, "{{listed_after r}}")
		args["after_us"], args["after_id"] = p.After.CreatedAtMicros, p.After.RunID
	}
	if len(where) == 0 {
		return "true", args
	}
	return strings.Join(where, " AND "), args
}

// ListRuns returns up to Limit runs after the cursor, and the cursor of the next page (nil at
// the end).
func (s *Store) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, *Cursor, error) {
	filter, args := listFilter(p)
	st, ok := listRunsByFilter.Load(filter)
	if !ok {
		st, _ = listRunsByFilter.LoadOrStore(filter, listRunsStmt.fill(map[string]string{"filter": filter}))
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

package store

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

var (
	getRunStmt        = stmt("get_run")
	getRunOfOwnerStmt = stmt("get_run_of_owner")
	runKeyOfOwnerStmt = stmt("run_key_of_owner")
	resolveRunStmt    = stmt("resolve_run")
	runHistoryStmt    = stmt("run_history")
	listRunsStmt      = stmtToFill("list_runs")
)

// Viewer is who is reading: a run is visible to its owner and to admins; to anyone else it
// does not exist.
type Viewer struct {
	Owner string
	Admin bool
}

// sees says whether v may see a run of owner's: its owner and admins may.
func (v Viewer) sees(owner string) bool { return v.Admin || owner == v.Owner }

// RunRef names a run as a caller does: by the id its owner chose. A client means its own run of
// that name; an admin one of any owner's, of Owner's when given, or — when no run has the name —
// the run with that key.
type RunRef struct {
	Name   string
	Viewer Viewer
	Owner  string // an admin's choice of owner; "" for none
}

// ErrRunIDAmbiguousError is an admin's id that names runs of several owners; the answer names
// them, for the admin to say whose.
type RunIDAmbiguousError struct{ Owners []string }

func (e *RunIDAmbiguousError) Error() string { return ErrRunIDAmbiguous.Error() }
func (e *RunIDAmbiguousError) Unwrap() error { return ErrRunIDAmbiguous }

// resolve finds the key of the run ref names, through q. A run the viewer may not see is
// ErrNotFound, the same as one that does not exist.
func resolve(ctx context.Context, q querier, ref RunRef) (string, error) {
	if !ref.Viewer.Admin {
		var key string
		err := runKeyOfOwnerStmt.queryRow(ctx, q, ref.Viewer.Owner, ref.Name).Scan(&key)
		return key, err
	}
	type match struct{ Key, Owner string }
	found, err := collect(ctx, q, resolveRunStmt, pgx.RowToStructByPos[match], named{"name": ref.Name, "owner": ref.Owner})
	switch {
	case err != nil:
		return "", err
	case len(found) == 0:
		return "", ErrNotFound
	case len(found) > 1:
		owners := make([]string, len(found))
		for i, m := range found {
			owners[i] = m.Owner
		}
		slices.Sort(owners)
		return "", &RunIDAmbiguousError{Owners: owners}
	}
	return found[0].Key, nil
}

// GetRun reads the run ref names, as its viewer may see it.
func (s *Store) GetRun(ctx context.Context, ref RunRef) (Run, error) {
	var run Run
	var err error
	if ref.Viewer.Admin {
		var key string
		if key, err = resolve(ctx, s.pool, ref); err != nil {
			return Run{}, err
		}
		run, err = getRun(ctx, s.pool, key)
	} else {
		run, err = scanRun(getRunOfOwnerStmt.queryRow(ctx, s.pool, ref.Viewer.Owner, ref.Name))
	}
	if err != nil {
		return Run{}, err
	}
	return run.ShownTo(ref.Viewer), nil
}

// GetRunByKey reads a run by its key, as v may see it: for a caller that holds the key from a
// write it made.
func (s *Store) GetRunByKey(ctx context.Context, key string, v Viewer) (Run, error) {
	run, err := getRun(ctx, s.pool, key)
	if err != nil {
		return Run{}, err
	}
	if !v.sees(run.owner) {
		return Run{}, ErrNotFound
	}
	return run.ShownTo(v), nil
}

// getRun reads one run by its key, whoever owns it, through q (the pool, or a transaction).
func getRun(ctx context.Context, q querier, key string) (Run, error) {
	return scanRun(getRunStmt.queryRow(ctx, q, key))
}

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var roles []struct {
		Name   string   `json:"name"`
		Needs  []string `json:"needs"`
		NodeID string   `json:"node_id"`
	}
	var position *int
	if err := row.Scan(&r.RunID, &r.key, &r.owner, &r.State, &r.Reason, &r.Priority, &r.Attempt, &r.MaxAttempts, &r.CreatedAt,
		&r.StartedAt, &r.FinishedAt, &r.CancelRequestedAt, &r.CancelReason, &r.TimeoutSeconds,
		&r.QueueTimeoutSeconds, &r.WaitForCapacity, &r.Metadata, &r.Kind, &r.HoldSeconds, &r.HoldEndsAt, &roles, &r.Steps, &position); err != nil {
		return Run{}, err
	}
	if r.Steps == nil {
		r.Steps = []Step{} // a hold's
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
	Kind   string // "" for every kind
	// Priority, when set, lists only runs of that priority.
	Priority *int
	Limit    int
	After    *Cursor
}

// Cursor is the keyset position of the last run of a page: when it was created, its name, and
// — for an admin's pages, which span owners — its key ("" on a client's: its names are unique).
type Cursor struct {
	CreatedAtMicros int64
	Name            string
	Key             string
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
	if p.Kind != "" {
		where, args["kind"] = append(where, "{{listed_kind r}}"), p.Kind
	}
	if p.Priority != nil {
		where, args["priority"] = append(where, "{{listed_priority r}}"), *p.Priority
	}
	if p.After != nil {
		where = append(where, "{{listed_after r}}")
		args["after_us"], args["after_name"], args["after_key"] = p.After.CreatedAtMicros, p.After.Name, p.After.Key
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
		runs = append(runs, r.ShownTo(p.Viewer))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, list.fail(err)
	}
	var next *Cursor
	if len(runs) > p.Limit {
		runs = runs[:p.Limit]
		last := runs[len(runs)-1]
		next = &Cursor{CreatedAtMicros: last.CreatedAt.UnixMicro(), Name: last.RunID}
		if p.Viewer.Admin {
			next.Key = last.key
		}
	}
	return runs, next, nil
}

// History is a run's event log, oldest first.
func (s *Store) History(ctx context.Context, runID string) ([]Event, error) {
	return collect(ctx, s.pool, runHistoryStmt, pgx.RowToStructByPos[Event], runID)
}

package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ending says which runs to end and how. due is a SELECT of run_id rows that locks them
// (FOR UPDATE, usually SKIP LOCKED): it is the decision, made inside the statement that acts
// on it, so there is no window between reading what is due and ending it (I7).
type ending struct {
	due       string // SELECT run_id FROM runs WHERE ... FOR UPDATE
	from      string // the state the due runs are in
	state     string // FAILED or CANCELLED
	reason    string
	kind      string // the event's kind
	pendingTo string // what a step that never started becomes: SKIPPED or CANCELLED
	args      named
}

// endSQL ends the due runs: every step that is not final becomes final, every lease is
// released, and each run gets its event — one statement, so one transaction.
const endSQL = `
WITH due AS (%s), run AS (
    UPDATE runs r SET state = @end_state::text, reason = @end_reason::text, finished_at = now(), deadline_at = NULL,
        cancel_requested_at = CASE WHEN @end_state::text = 'CANCELLED'
                                   THEN coalesce(r.cancel_requested_at, now()) ELSE r.cancel_requested_at END,
        cancel_reason = coalesce(r.cancel_reason, @cancel_reason::text)
    FROM due WHERE r.run_id = due.run_id AND r.state = @end_from::text
    RETURNING r.run_id, r.attempt
), steps AS (
    -- epoch NULL: no node reported this end, so a node's report of it is fenced (409), not
    -- taken for a repeat of one (a forced cancel answered a late "cancelled" with 200).
    UPDATE steps s SET state = CASE WHEN s.state = 'PENDING' THEN @pending_to::text ELSE 'CANCELLED' END,
        finished_at = now(), epoch = NULL
    FROM run WHERE s.run_id = run.run_id AND s.state IN ('PENDING', 'RUNNING')
), freed AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id RETURNING l.node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, attempt, @end_kind::text, @end_from::text, @end_state::text, @end_reason::text FROM run
)
SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM freed)`

// endRuns ends what e.due selects; it returns how many runs ended and leases were freed.
func endRuns(ctx context.Context, q querier, e ending) (ended, freed int, err error) {
	args := named{
		"end_state": e.state, "end_reason": e.reason, "end_from": e.from, "end_kind": e.kind,
		"pending_to": e.pendingTo, "cancel_reason": nil,
	}
	for k, v := range e.args {
		args[k] = v
	}
	err = q.QueryRow(ctx, fmt.Sprintf(endSQL, e.due), args).Scan(&ended, &freed)
	return ended, freed, translate(err)
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

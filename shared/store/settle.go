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
    RETURNING r.run_id, r.attempt, @end_from::text = 'QUEUED' AND ` + protected + ` AS unblocks
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
SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM freed), (SELECT count(*) FROM run WHERE unblocks)`

// endedRuns is what one endRuns did.
type endedRuns struct {
	runs  int // runs ended
	freed int // leases released
	// unblocked counts ended queued runs that starvation protection held nodes for: younger
	// runs may take those nodes now.
	unblocked int
}

// madeRoom says whether the end may have made room for a queued run: the caller wakes then.
func (e endedRuns) madeRoom() bool { return e.freed > 0 || e.unblocked > 0 }

// endRuns ends what e.due selects.
func (s *Store) endRuns(ctx context.Context, q querier, e ending) (endedRuns, error) {
	args := named{
		"end_state": e.state, "end_reason": e.reason, "end_from": e.from, "end_kind": e.kind,
		"pending_to": e.pendingTo, "cancel_reason": nil, "starvation": s.set.Starvation.Seconds(),
	}
	for k, v := range e.args {
		args[k] = v
	}
	var res endedRuns
	err := q.QueryRow(ctx, fmt.Sprintf(endSQL, e.due), args).Scan(&res.runs, &res.freed, &res.unblocked)
	return res, translate(err)
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

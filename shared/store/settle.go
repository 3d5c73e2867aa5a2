package store

import (
	"context"
)

// ending says which runs to end and how. stmt is one of the end_* statements of sql/*.sql:
// its due CTE selects and locks the runs to end (FOR UPDATE, usually SKIP LOCKED), which is
// the decision, made inside the statement that acts on it (I7); the fragment end_runs does
// the rest.
type ending struct {
	stmt      statement
	from      string // the state the due runs are in
	state     string // FAILED or CANCELLED; SUCCEEDED for a hold's end
	reason    string // none for SUCCEEDED
	kind      string // the event's kind
	pendingTo string // what a step that never started becomes: SKIPPED or CANCELLED
	args      named
}

// endedRuns is what one endRuns did.
type endedRuns struct {
	runs  int      // runs ended
	freed []string // the nodes whose leases it released
	// unblocked counts ended queued runs that starvation protection held nodes for: younger
	// runs may take those nodes now.
	unblocked int
}

// madeRoom says whether the end may have made room for a queued run: the caller wakes then.
func (e endedRuns) madeRoom() bool { return len(e.freed) > 0 || e.unblocked > 0 }

// endRuns ends what e selects, through q (the pool, or a transaction holding the run).
func (s *Store) endRuns(ctx context.Context, q querier, e ending) (endedRuns, error) {
	args := named{
		"end_state": e.state, "end_reason": nullIfEmpty(e.reason), "end_from": e.from, "end_kind": e.kind,
		"pending_to": e.pendingTo, "cancel_reason": nil, "starvation": s.set.Starvation.Seconds(),
	}
	for k, v := range e.args {
		args[k] = v
	}
	var res endedRuns
	err := e.stmt.queryRow(ctx, q, args).Scan(&res.runs, &res.freed, &res.unblocked)
	return res, err
}

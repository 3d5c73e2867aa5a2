package store

import (
	"context"
	"mediator/shared/wire"

	"github.com/jackc/pgx/v5"
)

var setPriorityStmt = stmt("set_priority")

// PriorityResult is a queued run after an admin changed its priority.
type PriorityResult struct {
	Run Run
	// CapacityAppeared: the priority changed, so the run may now go before others onto nodes
	// that are free. The caller wakes the queue then (a wake that can place nothing is one
	// statement).
	CapacityAppeared bool
}

// SetPriority changes a queued run's priority (admins: POST /v1/runs/{run_id}/priority). A run
// that is not queued is ErrRunNotQueued; one that does not exist, ErrNotFound. The same
// priority again changes nothing and records nothing.
func (s *Store) SetPriority(ctx context.Context, ref RunRef, priority int) (PriorityResult, error) {
	return inTx(ctx, s, func(tx pgx.Tx) (PriorityResult, error) {
		runID, err := resolve(ctx, tx, ref)
		if err != nil {
			return PriorityResult{}, err
		}
		lr, err := lockRun(ctx, tx, lockTarget{RunID: runID})
		if err != nil {
			return PriorityResult{}, err
		}
		if lr.state != wire.Queued {
			return PriorityResult{}, ErrRunNotQueued
		}
		var changed int
		if err := setPriorityStmt.queryRow(ctx, tx, named{"run_id": runID, "priority": priority}).Scan(&changed); err != nil {
			return PriorityResult{}, err
		}
		run, err := getRun(ctx, tx, runID)
		return PriorityResult{Run: run.ShownTo(ref.Viewer), CapacityAppeared: changed > 0}, err
	})
}

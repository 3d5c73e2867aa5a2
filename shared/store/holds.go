package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"mediator/shared/wire"
)

// Holds: a run of kind hold (wire.KindHold) has no steps and a length. It is matched, queued,
// prioritised, protected from starvation and refused exactly as any run (Submit, WakeQueued);
// placed, its nodes are leased until it ends: released by its owner (ReleaseHold), its time up
// (the reaper, reapHolds), cancelled (Cancel), or a node lost (FAILED lease_expired). A node's
// restart re-grants its lease under the new boot (loseLease). No step of it is ever final, so it
// never settles, and partial release does not apply. What a person waits on is an event of its
// own (holds.sql): hold_placed and hold_ended from the statements that place and end it,
// hold_expiring from the reaper (warnHolds).

var (
	endReleasedStmt = stmt("end_released")
	endHoldsDueStmt = stmt("end_holds_due")
	extendHoldStmt  = stmt("extend_hold")
	warnHoldsStmt   = stmt("warn_holds_ending")
)

// HoldResult is a hold after its owner's release or extend.
type HoldResult struct {
	Run Run
	// CapacityAppeared: the release freed nodes; the caller wakes the queue.
	CapacityAppeared bool
}

// ReleaseHold ends a hold at its owner's (or an admin's) word: a placed one SUCCEEDED, its nodes
// free (event hold_released); a queued one CANCELLED. A finished run is a *RunNotLiveError; a
// run of another kind ErrNotAHold.
func (s *Store) ReleaseHold(ctx context.Context, ref RunRef) (HoldResult, error) {
	return s.onHold(ctx, ref, func(tx pgx.Tx, key string, lr lockedRun) (bool, error) {
		e := ending{stmt: endReleasedStmt, from: wire.Running, state: wire.Succeeded, kind: "hold_released", args: named{"run_id": key}}
		if lr.state == wire.Queued {
			e = ending{stmt: endCancelledStmt, from: wire.Queued, state: wire.Cancelled, reason: wire.ReasonCancelled,
				kind: "cancelled", pendingTo: wire.Cancelled, args: named{"run_id": key, "cancel_reason": "released before it was placed"}}
		}
		ended, err := s.endRuns(ctx, tx, e)
		return ended.madeRoom(), err
	})
}

// ExtendHold moves a live hold's end later by seconds, to at most MAX_HOLD_SECONDS from now (a
// queued hold's length, to at most MAX_HOLD_SECONDS). A finished run is a *RunNotLiveError; a
// run of another kind ErrNotAHold.
func (s *Store) ExtendHold(ctx context.Context, ref RunRef, seconds int) (HoldResult, error) {
	return s.onHold(ctx, ref, func(tx pgx.Tx, key string, _ lockedRun) (bool, error) {
		_, err := extendHoldStmt.exec(ctx, tx, named{"run_id": key, "seconds": seconds, "max_hold": s.set.maxHold()})
		return false, err
	})
}

// onHold changes the live hold ref names (changeLiveRun); a run of another kind is ErrNotAHold.
func (s *Store) onHold(ctx context.Context, ref RunRef, act func(pgx.Tx, string, lockedRun) (bool, error)) (HoldResult, error) {
	room, run, err := changeLiveRun(ctx, s, ref, func(lr lockedRun) error {
		if lr.kind != wire.KindHold {
			return ErrNotAHold
		}
		return nil
	}, act)
	return HoldResult{Run: run, CapacityAppeared: room}, err
}

// reapHolds ends the placed holds whose time is up, SUCCEEDED (event hold_expired), a batch per
// transaction; their nodes are room for the wake that follows.
func (s *Store) reapHolds(ctx context.Context, sum *ReapSummary) (bool, error) {
	return s.endInBatches(ctx, &sum.HoldsEnded, sum, ending{
		stmt: endHoldsDueStmt, from: wire.Running, state: wire.Succeeded, kind: "hold_expired",
	})
}

// warnHolds writes the notice of each placed hold's end that is within HOLD_EXPIRING_LEAD_SECONDS
// (event hold_expiring), once per end, a batch per statement. After reapHolds, so that a hold
// whose time is already up is ended rather than warned of; it makes no room.
func (s *Store) warnHolds(ctx context.Context, sum *ReapSummary) (bool, error) {
	args := named{"lead": s.set.HoldExpiringLead.Seconds(), "batch": reapBatch}
	for inTime(ctx) {
		var n int
		if err := warnHoldsStmt.queryRow(ctx, s.pool, args).Scan(&n); err != nil {
			return false, err
		}
		sum.HoldsWarned += n
		if n < reapBatch {
			return false, nil
		}
	}
	sum.Unfinished = true
	return false, nil
}

package store

import (
	"context"
	"errors"
	"mediator/shared/wire"
	"slices"

	"github.com/jackc/pgx/v5"
)

// CancelParams is a cancel request. Force (admins only; the handler checks) settles at once.
type CancelParams struct {
	Run    RunRef
	Reason string
	Force  bool
}

// CancelResult is the run after the cancel, and what it freed.
type CancelResult struct {
	Run Run
	// Settled: the run is CANCELLED now. Otherwise the cancel is requested and the nodes
	// still running steps will acknowledge it (or the reaper settles it after CANCEL_GRACE).
	Settled  bool
	Released int
	// CapacityAppeared: the cancel released a lease, or took a starving run out of the queue
	// whose protection kept nodes from younger runs. The caller wakes the queue exactly then.
	CapacityAppeared bool
}

var (
	cancelRequestStmt = stmt("cancel_request")
	endCancelledStmt  = stmt("end_cancelled")
)

// Cancel cancels a run: a QUEUED run at once; a RUNNING one cooperatively — or at once with
// Force. A finished run is a *RunNotLiveError carrying it, and a run the
// viewer may not see is ErrNotFound. The caller wakes the queue when something was released.
func (s *Store) Cancel(ctx context.Context, p CancelParams) (CancelResult, error) {
	return inTx(ctx, s, func(tx pgx.Tx) (CancelResult, error) {
		key, err := resolve(ctx, tx, p.Run)
		if err != nil {
			return CancelResult{}, err
		}
		t := lockTarget{RunID: key}
		if !p.Run.Viewer.Admin {
			t.Owner = p.Run.Viewer.Owner
		}
		lr, err := lockRun(ctx, tx, t)
		if err != nil {
			return CancelResult{}, err
		}
		res, err := s.cancelLocked(ctx, tx, lr, key, p)
		if err != nil && !errors.Is(err, ErrRunNotLive) {
			return CancelResult{}, err
		}
		// The answer is read before COMMIT: once the cancel is committed, nothing may turn
		// the answer into an error (a request deadline passing, a dropped connection).
		run, readErr := getRun(ctx, tx, key)
		if readErr != nil {
			return CancelResult{}, readErr
		}
		run = run.ShownTo(p.Run.Viewer)
		if err != nil { // not live: say how it ended
			return CancelResult{}, &RunNotLiveError{Run: run}
		}
		res.Run = run
		return res, nil
	})
}

func (s *Store) cancelLocked(ctx context.Context, tx pgx.Tx, lr lockedRun, key string, p CancelParams) (CancelResult, error) {
	if wire.Final(lr.state) {
		return CancelResult{}, ErrRunNotLive
	}
	if lr.state == wire.Queued || p.Force || !slices.ContainsFunc(lr.steps, func(st reportStep) bool { return st.State == wire.Running }) {
		ended, err := s.endRuns(ctx, tx, ending{
			stmt: endCancelledStmt, from: lr.state, state: wire.Cancelled, reason: wire.ReasonCancelled, kind: "cancelled", pendingTo: wire.Cancelled,
			args: named{"run_id": key, "cancel_reason": nullIfEmpty(p.Reason)},
		})
		return CancelResult{Settled: true, Released: ended.freed, CapacityAppeared: ended.madeRoom()}, err
	}
	after := make([]reportStep, len(lr.steps))
	for i, st := range lr.steps {
		after[i] = st
		if st.State == wire.Pending {
			after[i].State = wire.Cancelled
		}
	}
	var released int
	err := cancelRequestStmt.queryRow(ctx, tx, named{
		"run_id": key, "reason": nullIfEmpty(p.Reason), "release": finalRoles(after), "first": !lr.cancelling,
	}).Scan(&released)
	return CancelResult{Released: released, CapacityAppeared: released > 0}, err
}

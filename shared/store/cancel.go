package store

import (
	"context"
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
	res, run, err := changeLiveRun(ctx, s, p.Run, nil, func(tx pgx.Tx, key string, lr lockedRun) (CancelResult, error) {
		return s.cancelLocked(ctx, tx, lr, key, p)
	})
	res.Run = run
	return res, err
}

// changeLiveRun is the one transaction of a change made to a live run from outside (a cancel, a
// hold's release or extend): the run ref names, as its viewer may see it, locked (lock_run); act
// applied while it is live; and the run read back before COMMIT, so that once the change is
// committed nothing can turn the answer into an error (a request deadline passing, a dropped
// connection). may, when given, refuses a run the change is not for, live or not; a finished run
// is a *RunNotLiveError carrying it; act is not called for either.
func changeLiveRun[T any](ctx context.Context, s *Store, ref RunRef, may func(lockedRun) error,
	act func(pgx.Tx, string, lockedRun) (T, error)) (T, Run, error) {
	type changed struct {
		res T
		run Run
	}
	c, err := inTx(ctx, s, func(tx pgx.Tx) (changed, error) {
		var c changed
		key, err := resolve(ctx, tx, ref)
		if err != nil {
			return c, err
		}
		t := lockTarget{RunID: key}
		if !ref.Viewer.Admin {
			t.Owner = ref.Viewer.Owner
		}
		lr, err := lockRun(ctx, tx, t)
		if err == nil && may != nil {
			err = may(lr)
		}
		if err != nil {
			return c, err
		}
		live := !wire.Final(lr.state)
		if live {
			if c.res, err = act(tx, key, lr); err != nil {
				return c, err
			}
		}
		run, err := getRun(ctx, tx, key)
		if err != nil {
			return c, err
		}
		c.run = run.ShownTo(ref.Viewer)
		if !live { // say how it ended
			return c, &RunNotLiveError{Run: c.run}
		}
		return c, nil
	})
	return c.res, c.run, err
}

func (s *Store) cancelLocked(ctx context.Context, tx pgx.Tx, lr lockedRun, key string, p CancelParams) (CancelResult, error) {
	if lr.state == wire.Queued || p.Force || !slices.ContainsFunc(lr.steps, func(st reportStep) bool { return st.State == wire.Running }) {
		ended, err := s.endRuns(ctx, tx, ending{
			stmt: endCancelledStmt, from: lr.state, state: wire.Cancelled, reason: wire.ReasonCancelled, kind: "cancelled", pendingTo: wire.Cancelled,
			args: named{"run_id": key, "cancel_reason": nullIfEmpty(p.Reason)},
		})
		return CancelResult{Settled: true, Released: len(ended.freed), CapacityAppeared: ended.madeRoom()}, err
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

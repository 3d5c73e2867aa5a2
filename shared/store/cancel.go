package store

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
)

// CancelParams is a cancel request. Force (admins only; the handler checks) settles at once.
type CancelParams struct {
	RunID  string
	Viewer Viewer
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

// cancelWriteSQL records a cooperative cancel of a run with steps still running: the intent
// (the first one is kept), every step not started yet cancelled, the nodes with nothing left
// running released. One statement, after the run's row is locked; the steps and leases are
// written only if the run is still RUNNING as it decided (I7). A run with nothing running
// settles at once instead, as a forced cancel does (endRuns).
const cancelWriteSQL = `
WITH run AS (
    UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, now()),
        cancel_reason = coalesce(cancel_reason, @reason::text)
    WHERE run_id = @run_id::text AND state = 'RUNNING'
    RETURNING attempt
), pending AS (
    UPDATE steps SET state = 'CANCELLED', finished_at = now(), epoch = NULL
    WHERE run_id = @run_id::text AND state = 'PENDING' AND EXISTS (SELECT 1 FROM run)
), freed AS (
    DELETE FROM leases WHERE run_id = @run_id::text AND role = ANY (@release::text[])
      AND EXISTS (SELECT 1 FROM run)
    RETURNING node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT @run_id::text, attempt, 'cancel_requested', 'RUNNING', 'RUNNING', NULL, NULL FROM run WHERE @first::bool
    UNION ALL
    SELECT @run_id::text, attempt, 'released', 'RUNNING', 'RUNNING', NULL, f.node_id FROM run, freed f
)
SELECT count(*) FROM freed`

// Cancel cancels a run (SPEC.md §5, Cancel): a QUEUED run at once; a RUNNING one cooperatively
// — or at once with Force. A finished run is a *RunNotLiveError carrying it, and a run the
// viewer may not see is ErrNotFound. The caller wakes the queue when something was released.
func (s *Store) Cancel(ctx context.Context, p CancelParams) (CancelResult, error) {
	var res CancelResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t := lockTarget{RunID: p.RunID}
		if !p.Viewer.Admin {
			t.Owner = p.Viewer.Owner
		}
		lr, err := lockRun(ctx, tx, t)
		if err != nil {
			return err
		}
		res, err = s.cancelLocked(ctx, tx, lr, p)
		if err != nil && !errors.Is(err, ErrRunNotLive) {
			return err
		}
		// The answer is read before COMMIT: once the cancel is committed, nothing may turn
		// the answer into an error (a request deadline passing, a dropped connection).
		run, readErr := getRun(ctx, tx, p.RunID)
		if readErr != nil {
			return readErr
		}
		if err != nil { // not live: say how it ended
			return &RunNotLiveError{Run: run}
		}
		res.Run = run
		return nil
	})
	return res, err
}

func (s *Store) cancelLocked(ctx context.Context, tx pgx.Tx, lr lockedRun, p CancelParams) (CancelResult, error) {
	if Terminal(lr.state) {
		return CancelResult{}, ErrRunNotLive
	}
	if lr.state == Queued || p.Force || !slices.ContainsFunc(lr.steps, func(st reportStep) bool { return st.State == Running }) {
		ended, err := s.endRuns(ctx, tx, ending{
			due:  `SELECT run_id FROM runs WHERE run_id = @run_id::text FOR UPDATE`,
			from: lr.state, state: Cancelled, reason: ReasonCancelled, kind: "cancelled", pendingTo: Cancelled,
			args: named{"run_id": p.RunID, "cancel_reason": nullIfEmpty(p.Reason)},
		})
		return CancelResult{Settled: true, Released: ended.freed, CapacityAppeared: ended.madeRoom()}, err
	}
	after := make([]reportStep, len(lr.steps))
	for i, st := range lr.steps {
		after[i] = st
		if st.State == Pending {
			after[i].State = Cancelled
		}
	}
	var released int
	err := tx.QueryRow(ctx, cancelWriteSQL, named{
		"run_id": p.RunID, "reason": nullIfEmpty(p.Reason), "release": finalRoles(after), "first": !lr.cancelling,
	}).Scan(&released)
	return CancelResult{Released: released, CapacityAppeared: released > 0}, err
}

package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The lock order. Every writer that holds more than one row takes them in this order: a
// node's row, then a run's, then a lease's (free_nodes rows, which only a writer taking the
// node as a lease holds, come before the run: wake_promote). A restart locks its node, then the
// run it loses; a report locks its run, then releases its leases; the reaper locks the run of
// an expired lease before it deletes the lease. Taken the other way round, a restart and a
// routine heartbeat, or a reaper and a report releasing the same node, would deadlock under load.
//
// The run lock. Every writer of a run — a report, a cancel, a reaper losing a lease — takes
// the run's row lock first (lock_run), and only then reads what it decides from
// (read_locked_run), so that no two of them interleave on one run and each decides from the
// run as the one before it left it (TestWriterDecidesFromTheRunAsLocked).

var (
	lockRunStmt       = stmt("lock_run")
	readLockedRunStmt = stmt("read_locked_run")
)

// lockTarget is the run a writer locks, and for whom.
type lockTarget struct {
	RunID  string
	NodeID string // a report's node ("" for a cancel)
	Owner  string // a non-admin cancel's owner ("" for an admin or a report)
}

// lockedRun is a run as a writer sees it once it holds the run's row.
type lockedRun struct {
	state      string
	attempt    int
	cancelling bool
	owner      string
	kind       string // wire.KindRun, wire.KindHealthCheck, wire.KindHold
	keeps      bool   // it keeps the nodes of its failed steps (keep_on_failure_seconds)
	steps      []reportStep
	epoch      *int64 // the node's lease on this run, if any
	boot, role *string
	// exists: the run exists, locked or not. A run that exists but was not locked is one the
	// writer may not act on (another owner's, or queued under a report).
	exists bool
}

// queueLockRun queues the lock of a run and then the read of it, with the node's lease on it
// (none for a cancel), into r. Pipelined, the read still runs after the lock is held, so it
// sees the run as locked. A run not locked — missing, or not the writer's to act on — leaves
// r.state empty (see locked).
func queueLockRun(b *pgx.Batch, t lockTarget, r *lockedRun) {
	lockRunStmt.queue(b, func(row pgx.Row) error {
		err := row.Scan(&r.state, &r.attempt, &r.cancelling, &r.owner, &r.kind, &r.keeps)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}, t.RunID, t.Owner, t.NodeID)
	readLockedRunStmt.queue(b, func(row pgx.Row) error {
		return row.Scan(&r.steps, &r.epoch, &r.boot, &r.role, &r.exists)
	}, t.RunID, t.NodeID)
}

// lockRun locks a run and reads it, in one round trip, inside tx.
func lockRun(ctx context.Context, tx pgx.Tx, t lockTarget) (lockedRun, error) {
	var r lockedRun
	b := &pgx.Batch{}
	queueLockRun(b, t, &r)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return r, err
	}
	return r, r.locked(t)
}

// locked says why a run was not locked: not found (also another owner's: to them it does not
// exist), or, for a report, stale — a queued run holds no lease to report under.
func (r lockedRun) locked(t lockTarget) error {
	switch {
	case r.state != "":
		return nil
	case r.exists && t.NodeID != "":
		return ErrStaleAssignment
	default:
		return ErrNotFound
	}
}

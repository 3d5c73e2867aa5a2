package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// leaseRef names one grant of a lease: the node and the epoch it was granted under. A decision
// made about a lease is only ever carried out on that same grant.
type leaseRef struct {
	NodeID string
	Epoch  int64
}

// lostLease is a lease its run is about to lose, and the condition the decision rested on.
type lostLease struct {
	leaseRef
	Reason      string // node_restarted | lease_expired | node_removed
	BootNot     string // restart: only while the lease is still held under another boot
	OnlyExpired bool   // reap: only while the lease is still expired (a renewal wins)
	// SkipLocked: if another writer holds the run, leave it to them (or to the next reap)
	// instead of waiting — four reapers over one backlog then share it instead of queueing.
	SkipLocked bool
}

// loseSQL carries out SPEC.md §7 in one statement: the lost lease goes (if it is still the
// one the decision was about), and its run either returns to the queue — same place, next
// attempt, holding nothing — or ends, FAILED with the reason, or CANCELLED if a cancel was
// already under way. Either way the run's other leases are released with it.
const loseSQL = `
/* lose a lease */
WITH lost AS (
    DELETE FROM leases WHERE node_id = @node_id::text AND epoch = @epoch::bigint
      AND (NOT @only_expired::bool OR expires_at < now())
      AND (@boot_not::text = '' OR boot_id <> @boot_not::text)
    RETURNING run_id
), run AS (
    UPDATE runs r SET
        state = CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'CANCELLED'
                     WHEN r.attempt < r.max_attempts THEN 'QUEUED' ELSE 'FAILED' END,
        reason = CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN r.attempt < r.max_attempts THEN NULL ELSE @reason::text END,
        attempt = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                       THEN r.attempt + 1 ELSE r.attempt END,
        queued_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                         THEN now() ELSE r.queued_at END,
        started_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                          THEN NULL ELSE r.started_at END,
        deadline_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN now() + r.queue_timeout_seconds * interval '1 second' END,
        finished_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN NULL ELSE now() END
    FROM lost WHERE r.run_id = lost.run_id AND r.state = 'RUNNING'
    RETURNING r.run_id, r.state, r.attempt, r.reason
), others AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id AND l.node_id <> @node_id::text
    RETURNING l.node_id
), roles AS (
    UPDATE run_roles ro SET node_id = '' FROM run
    WHERE ro.run_id = run.run_id AND run.state = 'QUEUED'
), steps AS (
    UPDATE steps st SET
        state = CASE WHEN run.state = 'QUEUED' THEN 'PENDING' ELSE 'CANCELLED' END,
        tries = CASE WHEN run.state = 'QUEUED' THEN 0 ELSE st.tries END,
        exit_code = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.exit_code END,
        message = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.message END,
        output = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.output END,
        epoch = NULL, -- queued: a new attempt; ended: by no report of a node (see endSQL)
        started_at = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.started_at END,
        finished_at = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE now() END
    FROM run
    WHERE st.run_id = run.run_id AND (run.state = 'QUEUED' OR st.state IN ('PENDING', 'RUNNING'))
), ev AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT run_id, CASE WHEN state = 'QUEUED' THEN attempt - 1 ELSE attempt END,
           'node_lost', 'RUNNING', state, @reason::text, @node_id::text
    FROM run
)
SELECT (SELECT count(*) FROM lost), (SELECT count(*) FROM others)`

// loseLease makes a run lose one of its nodes, if the lease is still the one the decision
// was about. It returns whether that lease went and how many leases were released in all:
// nothing, when another writer (a renewal, a second reaper, a settle) got there first, which
// is not an error.
func (s *Store) loseLease(ctx context.Context, tx pgx.Tx, l lostLease) (lost bool, released int, err error) {
	// The run's row before the lease (node, run, lease is the order every writer keeps):
	// taking the lease first deadlocked against a result releasing the same node.
	lock := `SELECT r.run_id FROM leases l JOIN runs r ON r.run_id = l.run_id
		WHERE l.node_id = $1 AND l.epoch = $2 FOR UPDATE OF r`
	if l.SkipLocked {
		lock += ` SKIP LOCKED`
	}
	var runID string
	err = tx.QueryRow(ctx, lock, l.NodeID, l.Epoch).Scan(&runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	var n, others int
	err = tx.QueryRow(ctx, loseSQL, named{
		"node_id": l.NodeID, "epoch": l.Epoch, "reason": l.Reason,
		"only_expired": l.OnlyExpired, "boot_not": l.BootNot,
	}).Scan(&n, &others)
	return n == 1, n + others, err
}

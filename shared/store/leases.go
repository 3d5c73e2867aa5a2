package store

import (
	"context"
	"errors"
	"mediator/shared/wire"

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
	NewBoot     string // restart: the boot a hold's lease is granted again under
	OnlyExpired bool   // reap: only while the lease is still expired (a renewal wins)
	// SkipLocked: if another writer holds the run, leave it to them (or to the next reap)
	// instead of waiting — four reapers over one backlog then share it instead of queueing.
	SkipLocked bool
}

var (
	loseLockRunStmt           = stmt("lose_lock_run")
	loseLockRunSkipLockedStmt = stmt("lose_lock_run_skip_locked")
	loseLeaseStmt             = stmt("lose_lease")
	loseLockNodeStmt          = stmt("lose_lock_node")
	regrantHoldStmt           = stmt("regrant_hold")
)

// loseLease makes a run lose one of its nodes, if the lease is still the one the decision
// was about. Nothing happens when another writer (a renewal, a second reaper, a settle) got
// there first, which is not an error.
func (s *Store) loseLease(ctx context.Context, tx pgx.Tx, l lostLease) (lost lostRun, err error) {
	lock := loseLockRunStmt
	if l.SkipLocked {
		lock = loseLockRunSkipLockedStmt
	}
	var kind string
	err = lock.queryRow(ctx, tx, l.NodeID, l.Epoch).Scan(&lost.runID, &kind)
	if errors.Is(err, ErrNotFound) {
		return lostRun{}, nil
	}
	if err != nil {
		return lostRun{}, err
	}
	if kind == wire.KindHold && l.Reason == wire.ReasonNodeRestarted {
		// A person rebooting a held board is debugging it: the hold goes on under the new boot.
		var run string
		err := regrantHoldStmt.queryRow(ctx, tx, l.NodeID, l.Epoch, l.NewBoot, s.set.LeaseTTL.Seconds()).Scan(&run)
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		lost.regranted = err == nil && run != ""
		return lost, err
	}
	var n int
	// An expiry or a restart counts against the node that lost the lease (health.sql); a removal
	// takes the node out of the fleet, and there is nothing left to count against. Nothing on a
	// hold counts: a person's use of a board says nothing of its health.
	blame := (l.Reason == wire.ReasonLeaseExpired || l.Reason == wire.ReasonNodeRestarted) && kind != wire.KindHold
	err = loseLeaseStmt.queryRow(ctx, tx, named{
		"node_id": l.NodeID, "epoch": l.Epoch, "reason": l.Reason,
		"only_expired": l.OnlyExpired, "boot_not": l.BootNot,
		"blame": blame, "lease_ttl": s.set.LeaseTTL.Seconds(), "quarantine_after": s.set.quarantineAfter(),
		"health_message": "the node lost run " + lost.runID + " (" + l.Reason + ")",
	}).Scan(&n, &lost.mates, &lost.healthChanged)
	lost.lost, lost.released = n == 1, n+len(lost.mates)
	if err != nil || !lost.lost || l.Reason == wire.ReasonNodeRemoved {
		return lost, err
	}
	// The node's row is the caller's (lock.go): a check the loss ended is applied, and a loss
	// that made the node suspect schedules one. The released lease wakes the queue either way.
	f, err := s.finishChecks(ctx, tx, []string{l.NodeID})
	lost.healthChanged = lost.healthChanged || len(f.HealthChanged) > 0
	if err == nil && blame {
		_, err = scheduleChecksStmt.exec(ctx, tx, named{"nodes": []string{l.NodeID}})
	}
	return lost, err
}

// lostRun is what loseLease did: whether the lease went, how many leases were released in
// all, and the run they were the run of.
type lostRun struct {
	runID    string
	lost     bool
	released int
	// mates are the run-mates' nodes whose leases went with the lost one.
	mates []string
	// regranted: the lease was a hold's, granted again under the node's new boot.
	regranted bool
	// healthChanged: the loss moved the node's health (health.sql), whose events its caller
	// publishes.
	healthChanged bool
}

package store

import (
	"context"
	"errors"
	"mediator/shared/wire"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReapSummary counts what one reap did.
type ReapSummary struct {
	Expired       int `json:"expired"`         // leases reaped because they expired
	Cancelled     int `json:"cancelled"`       // cancels settled after CANCEL_GRACE
	TimedOut      int `json:"timed_out"`       // runs past timeout_seconds
	QueueTimedOut int `json:"queue_timed_out"` // queued runs past queue_timeout_seconds
	Retired       int `json:"retired"`         // nodes silent past NODE_RETIRE_AFTER
	Unservable    int `json:"unservable"`      // queued runs no remaining node could serve
	Promoted      int `json:"promoted"`        // runs the wake placed on what was released
	// Stranded counts queued runs placed although nothing was released: each was a lost
	// wakeup, which healthy operation never produces.
	Stranded int `json:"stranded"`
	// HoldsEnded counts the holds whose time was up.
	HoldsEnded int `json:"holds_ended"`
	// HoldsWarned counts the placed holds warned that their end is within
	// HOLD_EXPIRING_LEAD_SECONDS (event hold_expiring).
	HoldsWarned int `json:"holds_warned"`
	// ChecksScheduled counts the periodic health checks whose time had come.
	ChecksScheduled int `json:"checks_scheduled"`
	// ChecksFinished counts the nodes a health check that ended by a cancel or a deadline
	// opened to other work.
	ChecksFinished int `json:"checks_finished"`
	// OutageGrace counts the leases given a fresh TTL because the system, not their nodes,
	// could accept no heartbeat for longer than a lease (see reapOutageGrace).
	OutageGrace int `json:"outage_grace"`
	// Pruned counts the runs deleted past RUN_RETENTION_DAYS.
	Pruned int `json:"pruned"`
	// Published counts the events the reap's publisher sent (upkeep fills it in).
	Published int `json:"published"`
	// Unfinished: the sweep stopped for the invocation's deadline; the next one goes on.
	Unfinished bool `json:"unfinished,omitempty"`
	// Walked is how many queued runs the wake considered (not part of the summary's JSON).
	Walked int `json:"-"`
	// HealthChanged are the nodes whose health the lost leases moved: the reap function
	// publishes their events right after the sweep (not part of the summary's JSON).
	HealthChanged []string `json:"-"`
	// Hinted are the nodes whose work the sweep changed: their leases released by a run's or
	// a hold's end (a timeout, a cancel's grace, a hold's time) or with a run-mate's expired
	// one, or a run placed on them by its wake. The reap function tells them to look now (not part of the summary's JSON).
	Hinted []string `json:"-"`
}

// reapBatch bounds each read of what is due, and so each transaction that acts on it: a
// backlog of ten thousand expired leases is worked through in small steps, never one huge
// transaction.
const reapBatch = 200

// reapMargin is how much of the invocation's deadline a sweep leaves unused, so a backlog ends
// the invocation cleanly instead of in a Lambda timeout.
const reapMargin = 3 * time.Second

// ReapParams are what a reap does beyond the database.
type ReapParams struct {
	// RemoveLogs, when set, removes the step logs of a run about to be pruned, before its rows
	// go: once they are gone nothing names the objects, and the run's key may be taken by a
	// new run whose logs would then share their prefix. A failure is logged and the run pruned
	// all the same — the database's retention does not wait for S3, and the bucket's lifecycle
	// rule expires what is left.
	RemoveLogs func(ctx context.Context, run PrunedRun) error
}

// PrunedRun is a run past retention, by the names its logs are kept under.
type PrunedRun struct {
	Owner string
	Key   string
}

// Reap is the scheduled sweep, in small independent transactions, each conditional on what its
// decision was based on. Two reapers at once are harmless: a write
// whose condition no longer holds changes nothing.
func (s *Store) Reap(ctx context.Context, p ReapParams) (ReapSummary, error) {
	var sum ReapSummary
	madeRoom := false
	steps := []func(context.Context, *ReapSummary) (bool, error){
		s.reapOutageGrace,   // before 1: an outage is not the nodes' fault
		s.reapExpiredLeases, // 1
		s.reapCancelGrace,   // 2
		s.reapTimeouts,      // 3
		s.reapQueueTimeouts, // 4
		s.reapHolds,         // a hold's time up: room, like a settle
		s.warnHolds,         // a hold's end near: a notice, no room
		// 6, before the wake: failing a starving run that no node can serve any more frees the
		// nodes its protection held, and the wake below must see that.
		s.reapRetired,
		// Health checks, after every step that may end one, before the wake that places them.
		s.reapHealthChecks,
	}
	for _, step := range steps {
		room, err := step(ctx, &sum)
		madeRoom = madeRoom || room
		if err != nil {
			return sum, err
		}
	}
	// 5: a wake when a step made room; otherwise the stranded-run detector, which is the same
	// wake: it only places a run that could be placed right now, and costs one query when no
	// node is available.
	wake, err := s.WakeQueued(ctx, WakeParams{})
	if err != nil {
		return sum, err
	}
	sum.Walked = wake.Walked
	sum.Hinted = append(sum.Hinted, wake.Placed...)
	if madeRoom {
		sum.Promoted = wake.Promoted
	} else if wake.Promoted > 0 {
		sum.Stranded = wake.Promoted
		s.log.Warn("stranded_runs_recovered", "count", wake.Promoted)
	}
	// 7: retention, and the queue's counts folded, last: nothing waits on them.
	if err := s.prune(ctx, p, &sum); err != nil {
		return sum, err
	}
	if err := s.pruneNodeHistory(ctx); err != nil {
		return sum, err
	}
	_, err = foldQueueCountsStmt.exec(ctx, s.pool)
	return sum, err
}

var foldQueueCountsStmt = stmt("fold_queue_counts")

var (
	pruneSwitchStmt = stmt("prune_switch")
	pruneDueStmt    = stmt("prune_due")
	pruneRunsStmt   = stmt("prune_runs")
)

// pruneBatch bounds each transaction that deletes runs past retention; pruneLogsBatch each,
// when the runs' logs go first: those cost two S3 requests a run, and a batch is read before
// them and pruned after.
const (
	pruneBatch     = 500
	pruneLogsBatch = 100
)

// prune deletes runs that ended more than RUN_RETENTION_DAYS ago, a batch per transaction,
// until none is due or the invocation's deadline nears. A run_id pruned may be used again.
func (s *Store) prune(ctx context.Context, p ReapParams, sum *ReapSummary) error {
	if s.set.RetentionDays <= 0 {
		return nil
	}
	for inTime(ctx) {
		batch, listed, keys, err := s.removeLogsBeforePrune(ctx, p)
		if err != nil {
			return err
		}
		if keys != nil && len(keys) == 0 {
			if listed == 0 {
				return nil
			}
			break // out of time before the first run's logs
		}
		n, err := inTx(ctx, s, func(tx pgx.Tx) (int, error) {
			if _, err := pruneSwitchStmt.exec(ctx, tx); err != nil {
				return 0, err
			}
			var n int
			err := pruneRunsStmt.queryRow(ctx, tx, named{"days": s.set.RetentionDays, "batch": batch, "keys": keys}).Scan(&n)
			return n, err
		})
		if err != nil {
			return err
		}
		sum.Pruned += n
		// Done, or what is left is held by other writers (SKIP LOCKED): the next reap takes it.
		if n == 0 || (keys == nil && n < batch) || (keys != nil && listed < batch) {
			return nil
		}
	}
	sum.Unfinished = true
	return nil
}

var pruneNodeHistoryStmt = stmt("prune_node_history")

// pruneNodeHistory deletes the lines of nodes' histories older than RUN_RETENTION_DAYS, a
// batch per statement, until none is due or the deadline nears: a node's history is read a few
// dozen lines at a time, and kept as long as the runs it names.
func (s *Store) pruneNodeHistory(ctx context.Context) error {
	if s.set.RetentionDays <= 0 {
		return nil
	}
	for inTime(ctx) {
		tag, err := pruneNodeHistoryStmt.exec(ctx, s.pool, named{"days": s.set.RetentionDays, "batch": pruneBatch})
		if err != nil || tag.RowsAffected() < pruneBatch {
			return err
		}
	}
	return nil
}

// removeLogsWithin bounds the removal of one run's logs: an S3 that does not answer must cost
// the reap a few seconds a run, not its whole deadline.
const removeLogsWithin = 5 * time.Second

// removeLogsBeforePrune removes the logs of the next batch of runs due (listed of them), when
// the reap removes logs at all (keys nil when it does not: any run due may be pruned). keys are
// the runs dealt with in time: those whose logs were removed, or could not be (logged), or that
// never ran.
func (s *Store) removeLogsBeforePrune(ctx context.Context, p ReapParams) (batch, listed int, keys []string, err error) {
	if p.RemoveLogs == nil {
		return pruneBatch, 0, nil, nil
	}
	type due struct {
		PrunedRun
		Ran bool
	}
	runs, err := collect(ctx, s.pool, pruneDueStmt, func(row pgx.CollectableRow) (due, error) {
		var d due
		return d, row.Scan(&d.Owner, &d.Key, &d.Ran)
	}, named{"days": s.set.RetentionDays, "batch": pruneLogsBatch})
	if err != nil {
		return 0, 0, nil, err
	}
	keys = []string{}
	for _, r := range runs {
		if !inTime(ctx) {
			break
		}
		if r.Ran {
			rctx, cancel := context.WithTimeout(ctx, removeLogsWithin)
			err := p.RemoveLogs(rctx, r.PrunedRun)
			cancel()
			if err != nil {
				s.log.Warn("step logs not removed before their run was pruned: the bucket's lifecycle rule expires them",
					"run_key", r.Key, "owner", r.Owner, "error", err.Error())
			}
		}
		keys = append(keys, r.Key)
	}
	return pruneLogsBatch, len(runs), keys, nil
}

// inTime reports whether the invocation has time for another batch.
func inTime(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ctx.Err() == nil && (!ok || time.Until(deadline) > reapMargin)
}

var (
	outageGraceStmt      = stmt("outage_grace")
	expiredLeasesStmt    = stmt("expired_leases")
	endCancelGraceStmt   = stmt("end_cancel_grace")
	endTimedOutStmt      = stmt("end_timed_out")
	endQueueTimedOutStmt = stmt("end_queue_timed_out")
)

// reapOutageGrace runs before step 1: when the system could not renew leases, their expiry says
// nothing about their nodes, and reaping them would fail or requeue every healthy run (as Nomad
// after a leader failover, or Kubernetes in a zone disruption, holds off). It makes no room.
func (s *Store) reapOutageGrace(ctx context.Context, sum *ReapSummary) (bool, error) {
	var expired int
	var silent float64
	err := outageGraceStmt.queryRow(ctx, s.pool, named{"ttl": s.set.LeaseTTL.Seconds()}).Scan(&sum.OutageGrace, &expired, &silent)
	if err != nil {
		return false, err
	}
	if sum.OutageGrace > 0 {
		s.log.Warn("outage_grace", "leases_renewed", sum.OutageGrace, "leases_expired", expired,
			"silent_seconds", silent)
	}
	return false, nil
}

// reapExpiredLeases (step 1) reaps each expired lease in its own transaction, only if it is
// still the same grant and still expired when the write happens: a renewal between the read
// and the write wins.
func (s *Store) reapExpiredLeases(ctx context.Context, sum *ReapSummary) (bool, error) {
	freed := 0
	for inTime(ctx) {
		due, err := collect(ctx, s.pool, expiredLeasesStmt, pgx.RowToStructByPos[leaseRef], reapBatch)
		if err != nil {
			return freed > 0, err
		}
		progress := false
		for _, l := range due {
			if !inTime(ctx) {
				break
			}
			o, err := s.reapLease(ctx, l)
			if err != nil {
				return freed > 0, err
			}
			if o.lost {
				sum.Expired++
			}
			if o.healthChanged && !slices.Contains(sum.HealthChanged, l.NodeID) {
				sum.HealthChanged = append(sum.HealthChanged, l.NodeID)
			}
			freed += o.released
			sum.Hinted = append(sum.Hinted, o.mates...)
			progress = progress || o.released > 0
		}
		if len(due) < reapBatch || !progress {
			break // done, or the rest is held by other writers: the next reap takes it
		}
	}
	sum.Unfinished = sum.Unfinished || !inTime(ctx)
	return freed > 0, nil
}

// reapHealthChecks applies the outcome of the checks that ended without a report or a loss
// applying it (a cancel, a deadline), and schedules the periodic checks due. Either makes room:
// a node open again, or one reserved for a check the wake places.
func (s *Store) reapHealthChecks(ctx context.Context, sum *ReapSummary) (bool, error) {
	f, err := s.finishChecks(ctx, s.pool, nil)
	if err != nil {
		return false, err
	}
	sum.ChecksFinished = len(f.Opened)
	for _, n := range f.HealthChanged {
		if !slices.Contains(sum.HealthChanged, n) {
			sum.HealthChanged = append(sum.HealthChanged, n)
		}
	}
	if sum.ChecksScheduled, err = s.SchedulePeriodicChecks(ctx); err != nil {
		return len(f.Opened) > 0, err
	}
	return len(f.Opened) > 0 || sum.ChecksScheduled > 0, nil
}

// reapLease is one expired lease's transaction.
func (s *Store) reapLease(ctx context.Context, l leaseRef) (lostRun, error) {
	return inTx(ctx, s, func(tx pgx.Tx) (lostRun, error) {
		// The node first (lock.go): the loss counts against it. A node another writer holds
		// (a restart, a report on it) is left to them, or to the next reap.
		if err := loseLockNodeStmt.queryRow(ctx, tx, l.NodeID).Scan(new(int)); err != nil {
			if errors.Is(err, ErrNotFound) {
				return lostRun{}, nil
			}
			return lostRun{}, err
		}
		return s.loseLease(ctx, tx, lostLease{
			leaseRef: l, Reason: wire.ReasonLeaseExpired, OnlyExpired: true, SkipLocked: true,
		})
	})
}

func (s *Store) reapCancelGrace(ctx context.Context, sum *ReapSummary) (bool, error) {
	return s.endInBatches(ctx, &sum.Cancelled, sum, ending{
		stmt: endCancelGraceStmt, from: wire.Running, state: wire.Cancelled, reason: wire.ReasonCancelled,
		kind: "cancel_grace_expired", pendingTo: wire.Cancelled,
		args: named{"grace": s.set.CancelGrace.Seconds()},
	})
}

func (s *Store) reapTimeouts(ctx context.Context, sum *ReapSummary) (bool, error) {
	return s.endInBatches(ctx, &sum.TimedOut, sum, ending{
		stmt: endTimedOutStmt, from: wire.Running, state: wire.Failed, reason: wire.ReasonTimeout,
		kind: "timed_out", pendingTo: wire.Cancelled,
	})
}

func (s *Store) reapQueueTimeouts(ctx context.Context, sum *ReapSummary) (bool, error) {
	return s.endInBatches(ctx, &sum.QueueTimedOut, sum, ending{
		stmt: endQueueTimedOutStmt, from: wire.Queued, state: wire.Failed, reason: wire.ReasonQueueTimeout,
		kind: "queue_timed_out", pendingTo: wire.Skipped,
	})
}

// endInBatches ends what e selects, a batch per transaction, until nothing is due. It says
// whether an end made room for a queued run.
func (s *Store) endInBatches(ctx context.Context, count *int, sum *ReapSummary, e ending) (bool, error) {
	if e.args == nil {
		e.args = named{}
	}
	e.args["batch"] = reapBatch
	madeRoom := false
	for inTime(ctx) {
		ended, err := s.endRuns(ctx, s.pool, e)
		if err != nil {
			return madeRoom, err
		}
		*count += ended.runs
		sum.Hinted = append(sum.Hinted, ended.freed...)
		madeRoom = madeRoom || ended.madeRoom()
		if ended.runs < reapBatch {
			return madeRoom, nil
		}
	}
	sum.Unfinished = true
	return madeRoom, nil
}

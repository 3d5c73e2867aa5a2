package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"mediator/shared/wire"
	"slices"

	"github.com/jackc/pgx/v5"
)

// ReportResult is what a report did.
type ReportResult struct {
	StepState string // the step's state now
	RunState  string // the run's state now
	Released  int    // leases released (partial release, or the settle)
	Settled   string // the run's final state, when this report settled it
	// Next are the node's steps of this run that it may start now, so it can go on without
	// waiting for its next heartbeat.
	Next []NodeStep
	// CapacityAppeared: the report released a lease (partial release or the settle). A retry
	// (rollback to PENDING) frees nothing. The caller wakes the queue exactly then.
	CapacityAppeared bool
	// Held are the released nodes held for the caller's wake (WakeParams.Held), because runs
	// were queued: no other wake places on them until that wake has, or has let them go.
	Held []string
	// Read is the queue as read inside the report's transaction once it held the reporter's
	// node (report_wake_start; WakeParams.Read), or nil.
	Read *QueueRead
	// Log is where the try a started report began keeps its log (nil for any other report):
	// the answer hands the node its first upload URLs, fenced as the report was.
	Log *LogTarget
	// HealthChanged is the reporter's node when the report moved its health (a failure counted
	// to suspect or quarantined, a success making a suspect node healthy): its events are the
	// caller's to publish. Nil otherwise, the routine report's case, read from the write's own
	// answer at no extra cost.
	HealthChanged []string
	// freesReporter: the write releases the reporter's own lease.
	freesReporter bool
	// health: the write may change the node's health (reportsHealth).
	health *string
	// DebugHold is the hold the settle passed the failed steps' nodes to (keep_on_failure), or nil.
	DebugHold *string
	// checkFinished: the report ended the health check due on its node.
	checkFinished ChecksFinished
	// RunMates are the nodes of the run's other roles whose work the report changed: a step of
	// theirs it made runnable (their outputs' inputs are in), or the run it settled under them
	// (their steps to stop, their leases gone). The caller tells them to look now (push).
	RunMates []string
}

// reportStep is a step as the report path reads it.
type reportStep struct {
	ID       string   `json:"id"`
	Role     string   `json:"role"`
	State    string   `json:"state"`
	After    []string `json:"after"`
	Tries    int      `json:"tries"`
	Retries  int      `json:"retries"`
	ExitCode *int     `json:"exit_code"`
	Epoch    *int64   `json:"epoch"`
	NodeID   string   `json:"node_id"` // the node the step's role was given
}

var (
	reportStepStmt  = stmt("report_step")
	reportWriteStmt = stmt("report_write")
	reportNextStmt  = stmt("report_next")

	keepForDebugStmt   = stmt("keep_for_debug")
	reportLockNodeStmt = stmt("report_lock_node")
	reportHealthStmt   = stmt("report_health")
)

// Report applies a node's report on one step, all in one transaction: the step, the
// dependents of a failed step (SKIPPED), the node's lease once its steps are all final
// (partial release), and the run once every step is (settle). The caller wakes the queue
// after it when CapacityAppeared.
func (s *Store) Report(ctx context.Context, p wire.Report) (ReportResult, error) {
	return pipelinedTx(ctx, s, func() pipelined[ReportResult] {
		var lr lockedRun
		var res ReportResult
		return pipelined[ReportResult]{
			read: func(b *pgx.Batch) {
				if p.Status != wire.ReportStarted {
					// The node before the run (lock.go): the report may change its health, or
					// end the health check due on it.
					b.Queue(reportLockNodeStmt.sql, p.NodeID, p.Status == wire.ReportFailed && p.Failure == wire.FailureInfra, p.RunID)
				}
				queueLockRun(b, lockTarget{RunID: p.RunID, NodeID: p.NodeID}, &lr)
			},
			write: func(b *pgx.Batch) error {
				if err := planReport(lr, p, b, &res, s.set.LeaseTTL.Seconds()); err != nil {
					return err
				}
				if res.health != nil {
					s.queueReportHealth(b, p, res.StepState, *res.health == wire.FailureInfra, &res)
				}
				if lr.kind == wire.KindHealthCheck && res.Settled != "" {
					// The check ended: its outcome moves the node, which it opens to other work.
					queueFinishChecks(b, []string{p.NodeID}, &res.checkFinished)
				}
				if res.health != nil && *res.health == wire.FailureInfra {
					// An infrastructure failure that made the node suspect: a check applies, and
					// the node serves it alone from this commit on.
					scheduleChecksStmt.queue(b, func(row pgx.Row) error { return row.Scan(new(int)) },
						named{"nodes": []string{p.NodeID}})
				}
				if !res.freesReporter {
					return nil
				}
				s.queueReportRead(b, p.NodeID, &res)
				return nil
			},
			result: func() ReportResult {
				if len(res.checkFinished.HealthChanged) > 0 {
					res.HealthChanged = []string{p.NodeID}
				}
				res.CapacityAppeared = res.CapacityAppeared || len(res.checkFinished.Opened) > 0
				return res
			},
		}
	})
}

// reportsHealth says what a report may do to its node's health: count an infrastructure
// failure (FailureInfra), reset the count after a success (""), or nothing (nil). A test
// failure never counts.
func reportsHealth(p wire.Report) *string {
	switch {
	case p.Status == wire.ReportFailed && p.Failure == wire.FailureInfra:
		return &p.Failure
	case p.Status == wire.ReportSucceeded:
		none := ""
		return &none
	}
	return nil
}

// queueReportHealth writes what the report does to its node's health, in the report's
// transaction, only if its step was written as decided (report_health), and names the node in
// res.HealthChanged when its health moved.
func (s *Store) queueReportHealth(b *pgx.Batch, p wire.Report, state string, infra bool, res *ReportResult) {
	msg := "exit code unknown"
	if p.ExitCode != nil {
		msg = fmt.Sprintf("exit code %d", *p.ExitCode)
	}
	if p.Message != nil && *p.Message != "" {
		msg = *p.Message
	}
	reportHealthStmt.queue(b, func(row pgx.Row) error {
		var moved int
		if err := row.Scan(&moved); err != nil {
			return err
		}
		if moved > 0 {
			res.HealthChanged = []string{p.NodeID}
		}
		return nil
	}, named{
		"health_node": p.NodeID, "run_id": p.RunID, "step_id": p.StepID, "state": state, "epoch": p.Epoch,
		"infra": infra, "quarantine_after": s.set.quarantineAfter(),
		"health_message": fmt.Sprintf("step %s of run %s: %s", p.StepID, p.RunID, msg),
	})
}

// queueReportRead reads the queue after the write, inside the report's transaction, so that it
// sees the hold on the reporter's node: the reporter's wake starts from it (res.Read), and from
// nothing when the node is not held.
func (s *Store) queueReportRead(b *pgx.Batch, node string, res *ReportResult) {
	read := &QueueRead{}
	b.Queue(s.bound.reportWakeStart.sql, named{"node": node, "held": []string{node}}).Query(func(rows pgx.Rows) error {
		if err := read.scan(s.bound.reportWakeStart, rows); err != nil {
			return err
		}
		if slices.Contains(res.Held, node) {
			res.Read = read
		}
		return nil
	})
}

// planReport decides what the report does to the run as locked, puts the answer in res and
// queues the write (nothing when the report changes nothing).
func planReport(lr lockedRun, p wire.Report, b *pgx.Batch, res *ReportResult, leaseTTL float64) error {
	if err := lr.locked(lockTarget{RunID: p.RunID, NodeID: p.NodeID}); err != nil {
		return err
	}
	runState, attempt, cancelling, steps, epoch, boot, role := lr.state, lr.attempt, lr.cancelling, lr.steps, lr.epoch, lr.boot, lr.role
	i := slices.IndexFunc(steps, func(st reportStep) bool { return st.ID == p.StepID })
	if i < 0 {
		return ErrNotFound
	}
	st := steps[i]
	want := reportedState(p.Status)
	// The same report again — recognised by the node and the epoch it was accepted under,
	// because after a settle the lease it was fenced by is gone — changes nothing. Without the
	// node in the match, any node repeating another's report would get 200.
	if st.Epoch != nil && *st.Epoch == p.Epoch && st.NodeID == p.NodeID && st.State == want && sameCode(st.ExitCode, p.ExitCode, want) {
		*res = ReportResult{StepState: st.State, RunState: runState, Next: []NodeStep{}}
		if p.Status == wire.ReportStarted {
			// A step still RUNNING under the epoch it started with is still under that lease:
			// losing the lease, or the boot, resets the step's epoch.
			res.Log = &LogTarget{Owner: lr.owner, RunKey: p.RunID, Attempt: attempt, StepID: p.StepID, Try: st.Tries, Epoch: p.Epoch}
		}
		return nil
	}
	if runState != wire.Running || epoch == nil || *epoch != p.Epoch || *boot != p.BootID || *role != st.Role {
		return ErrStaleAssignment
	}
	if wire.Final(st.State) {
		return ErrResultConflict
	}
	d, err := decide(steps, i, p, cancelling)
	if err != nil {
		return err
	}
	var keep []string
	if lr.keeps {
		// The nodes of failed steps stay leased to the run until it settles, and then pass to
		// its debug hold (keep_for_debug) rather than back to the queue.
		failed := failedRoles(d.after)
		d.release = slices.DeleteFunc(d.release, func(r string) bool { return slices.Contains(failed, r) })
		if d.settle == wire.Failed && d.reason == wire.ReasonStepFailed {
			keep = failed
		}
	}
	*res = ReportResult{StepState: d.state, RunState: runState, Settled: d.settle}
	if d.settle != "" {
		res.RunState = d.settle
	}
	if p.Status == wire.ReportStarted {
		res.Log = &LogTarget{Owner: lr.owner, RunKey: p.RunID, Attempt: attempt, StepID: p.StepID, Try: d.tries, Epoch: p.Epoch}
	}
	write := reportWriteStmt
	if len(d.skip) == 0 && len(d.release) == 0 && d.settle == "" {
		write = reportStepStmt
	}
	res.freesReporter = d.settle != "" && !slices.Contains(keep, st.Role) || slices.Contains(d.release, st.Role)
	res.health = reportsHealth(p)
	next := d.next(st.Role)
	write.queue(b, func(row pgx.Row) error {
		var wrote int
		if err := row.Scan(&wrote, &res.Released, &res.Held); err != nil {
			return err
		}
		if wrote == 0 {
			return ErrStaleAssignment // the step or the lease was not as decided: nothing written
		}
		res.CapacityAppeared = res.Released > 0
		return nil
	}, named{
		"run_id": p.RunID, "step_id": p.StepID, "state": d.state, "tries": d.tries,
		"exit_code": p.ExitCode, "message": p.Message, "output": p.Output, "epoch": p.Epoch,
		"skip": d.skip, "release": d.release, "settle": d.settle, "reason": nullIfEmpty(d.reason),
		"attempt": attempt, "outputs": outputsArg(p.Outputs),
		"prev": st.State, "node_id": p.NodeID, "boot_id": p.BootID, "role": st.Role, "hold": holdFor.Seconds(),
		"keep": nonNil(keep),
	}.with(logArgs(p)))
	if len(keep) > 0 {
		keepForDebugStmt.queue(b, func(row pgx.Row) error { return row.Scan(&res.DebugHold) }, named{
			"run_id": p.RunID, "keep": keep, "hold_id": debugHoldID(p.RunID), "lease_ttl": leaseTTL,
		})
	}
	res.RunMates = runMates(steps, d, st.Role)
	res.Next = []NodeStep{}
	if len(next) > 0 {
		reportNextStmt.queue(b, func(row pgx.Row) error { return row.Scan(&res.Next) }, p.RunID, next)
	}
	return nil
}

// logArgs are a report's log summary as record_step_log takes it: NULLs for none.
func logArgs(p wire.Report) named {
	if p.Log == nil {
		return named{"log_state": nil, "log_bytes": nil, "log_sha256": nil, "log_uploaded": nil}
	}
	return named{"log_state": reportedState(p.Status), "log_bytes": p.Log.Bytes, "log_sha256": p.Log.SHA256, "log_uploaded": p.Log.Uploaded}
}

// outputsArg is a report's outputs as the statement takes them: SQL NULL for none.
func outputsArg(o map[string]string) any {
	if len(o) == 0 {
		return nil
	}
	return o
}

// decision is what a report does to the run, decided from the run as locked.
type decision struct {
	state   string   // the reported step's new state
	tries   int      // its tries
	skip    []string // dependents that can no longer run
	release []string // roles whose steps are now all final: their nodes are released
	settle  string   // the run's final state, or ""
	reason  string
	after   []reportStep // the steps as they will be
}

func decide(steps []reportStep, i int, p wire.Report, cancelling bool) (decision, error) {
	st := steps[i]
	d := decision{tries: st.Tries}
	switch p.Status {
	case wire.ReportStarted:
		if st.State == wire.Running {
			return decision{}, ErrResultConflict // started under another epoch
		}
		if cancelling || !runnable(steps, st) {
			return decision{}, ErrNotRunnable
		}
		d.state, d.tries = wire.Running, st.Tries+1
	case wire.ReportSucceeded, wire.ReportFailed:
		if st.State != wire.Running {
			return decision{}, ErrNotRunnable // report started first
		}
		d.state = reportedState(p.Status)
		if p.Status == wire.ReportFailed && st.Tries <= st.Retries && !cancelling {
			d.state = wire.Pending // a retry: back on the same node, nothing freed
		}
	case wire.ReportCancelled:
		d.state = wire.Cancelled
	}
	d.after = slices.Clone(steps)
	d.after[i].State, d.after[i].Tries = d.state, d.tries
	if d.state == wire.Failed || d.state == wire.Cancelled {
		d.skip = dependents(d.after, st.ID)
		for j := range d.after {
			if slices.Contains(d.skip, d.after[j].ID) {
				d.after[j].State = wire.Skipped
			}
		}
	}
	if !wire.Final(d.state) {
		return d, nil
	}
	// A role whose steps were final before this report was released then; releasing it
	// again finds no lease and does nothing.
	d.release = finalRoles(d.after)
	if allFinal(d.after, "") {
		d.settle, d.reason = settledState(d.after, cancelling)
	}
	return d, nil
}

// settledState: SUCCEEDED iff every step succeeded; else CANCELLED if a cancel was
// requested; else FAILED step_failed.
func settledState(steps []reportStep, cancelling bool) (string, string) {
	if !slices.ContainsFunc(steps, func(s reportStep) bool { return s.State != wire.Succeeded }) {
		return wire.Succeeded, ""
	}
	if cancelling {
		return wire.Cancelled, wire.ReasonCancelled
	}
	return wire.Failed, wire.ReasonStepFailed
}

// dependents are the PENDING steps that wait, directly or not, for step id.
func dependents(steps []reportStep, id string) []string {
	var out []string
	frontier := []string{id}
	for len(frontier) > 0 {
		cur := frontier[0]
		frontier = frontier[1:]
		for _, s := range steps {
			if s.State == wire.Pending && slices.Contains(s.After, cur) && !slices.Contains(out, s.ID) {
				out = append(out, s.ID)
				frontier = append(frontier, s.ID)
			}
		}
	}
	return out
}

// runnable: every step st waits for has SUCCEEDED (the rest of the rule — PENDING, no cancel
// requested — the callers check). sql/rules.sql's runnable is its SQL twin.
func runnable(steps []reportStep, st reportStep) bool {
	for _, dep := range st.After {
		if j := slices.IndexFunc(steps, func(s reportStep) bool { return s.ID == dep }); j < 0 || steps[j].State != wire.Succeeded {
			return false
		}
	}
	return true
}

// failedRoles are the roles with a FAILED step.
func failedRoles(steps []reportStep) []string {
	var out []string
	for _, s := range steps {
		if s.State == wire.Failed && !slices.Contains(out, s.Role) {
			out = append(out, s.Role)
		}
	}
	return out
}

// debugHoldID is the id (and name) of the debug hold of the run of key: the key, cut to leave
// room, ".debug." and a random tail of its own, under wire.IDPattern.
func debugHoldID(key string) string {
	const tail = len(".debug.") + 8
	if len(key) > 128-tail {
		key = key[:128-tail]
	}
	var b [8]byte
	for i := range b {
		b[i] = keyAlphabet[rand.IntN(len(keyAlphabet))]
	}
	return key + ".debug." + string(b[:])
}

// finalRoles are the roles whose steps are all final.
func finalRoles(steps []reportStep) []string {
	var out []string
	for _, s := range steps {
		if !slices.Contains(out, s.Role) && allFinal(steps, s.Role) {
			out = append(out, s.Role)
		}
	}
	return out
}

// allFinal reports whether every step of role ("" for the whole run) is final.
func allFinal(steps []reportStep, role string) bool {
	for _, s := range steps {
		if (role == "" || s.Role == role) && !wire.Final(s.State) {
			return false
		}
	}
	return true
}

// next are the role's steps that can start once this report is in.
func (d decision) next(role string) []string {
	out := []string{}
	for _, s := range d.after {
		if s.Role == role && s.State == wire.Pending && runnable(d.after, s) {
			out = append(out, s.ID)
		}
	}
	return out
}

// runMates are the nodes of roles other than role whose steps d made runnable, or, when d
// settles the run, every other role's node.
func runMates(before []reportStep, d decision, role string) []string {
	var out []string
	for i, s := range d.after {
		if s.Role == role || s.NodeID == "" || slices.Contains(out, s.NodeID) {
			continue
		}
		madeRunnable := s.State == wire.Pending && runnable(d.after, s) && !runnable(before, before[i])
		if d.settle != "" || madeRunnable {
			out = append(out, s.NodeID)
		}
	}
	return out
}

func reportedState(status string) string {
	switch status {
	case wire.ReportStarted:
		return wire.Running
	case wire.ReportSucceeded:
		return wire.Succeeded
	case wire.ReportFailed:
		return wire.Failed
	case wire.ReportCancelled:
		return wire.Cancelled
	}
	return ""
}

// sameCode: a terminal report repeated must carry the same exit code to be the same report.
func sameCode(stored, reported *int, state string) bool {
	if !wire.Final(state) {
		return true
	}
	if stored == nil || reported == nil {
		return stored == nil && reported == nil
	}
	return *stored == *reported
}

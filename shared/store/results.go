package store

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Report statuses a node may send.
const (
	ReportStarted   = "started"
	ReportSucceeded = "succeeded"
	ReportFailed    = "failed"
	ReportCancelled = "cancelled"
)

// ReportParams is one step report, fenced by node, boot and lease epoch.
type ReportParams struct {
	RunID, StepID   string
	NodeID, BootID  string
	Epoch           int64
	Status          string
	ExitCode        *int
	Message, Output *string
}

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

// lockRunSQL takes the run's row lock: every writer of a run takes it first, so a report, a
// cancel and a reaper never interleave on one run.
//
// It locks only a run the writer may act on. The wake takes a locked queued run for one being
// promoted and places the run behind it, so a lock taken for nothing broke arrival order: a
// stranger's cancel (404 after the lock) or a node's late report on a run that was requeued
// (409: a queued run holds no lease to report under) let a younger run overtake the older.
// $2: the owner a non-admin cancel must be; $3: a report's node, which never locks a queued run.
const lockRunSQL = `SELECT state, attempt, cancel_requested_at IS NOT NULL FROM runs
	WHERE run_id = $1 AND ($2::text = '' OR owner = $2::text) AND ($3::text = '' OR state <> 'QUEUED')
	FOR UPDATE`

// lockTarget is the run a writer locks, and for whom.
type lockTarget struct {
	RunID  string
	NodeID string // a report's node ("" for a cancel)
	Owner  string // a non-admin cancel's owner ("" for an admin or a report)
}

// readLockedSQL reads the run's steps and nodeID's lease on it. It is a statement of its own,
// after the lock, on purpose: a SELECT ... FOR UPDATE that waited for the lock re-reads the
// locked row but not the rest of its statement, so steps read in the same statement as the
// lock were as they stood before the writer we waited for. A cancel queued behind the report
// that finished the last running step decided from those and left the run RUNNING with every
// step final and no lease (found by the stress test; TestWriterDecidesFromTheRunAsLocked).
const readLockedSQL = `
	SELECT (SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state,
	                'after', s.after, 'tries', s.tries, 'retries', s.retries, 'exit_code', s.exit_code,
	                'epoch', s.epoch, 'node_id', ro.node_id) ORDER BY s.ordinal)
	          FROM steps s JOIN run_roles ro ON ro.run_id = s.run_id AND ro.role = s.role
	          WHERE s.run_id = $1),
	       l.epoch, l.boot_id, l.role, EXISTS (SELECT 1 FROM runs WHERE run_id = $1)
	FROM (SELECT 1) one LEFT JOIN leases l ON l.run_id = $1 AND l.node_id = $2`

// lockedRun is a run as a writer sees it once it holds the run's row.
type lockedRun struct {
	state      string
	attempt    int
	cancelling bool
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
	b.Queue(lockRunSQL, t.RunID, t.Owner, t.NodeID).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&r.state, &r.attempt, &r.cancelling)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	b.Queue(readLockedSQL, t.RunID, t.NodeID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&r.steps, &r.epoch, &r.boot, &r.role, &r.exists)
	})
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

// reportStepUpdate writes the reported step; reportNextSteps are the steps the report made
// runnable for the node, as it is told them. Both report statements share them.
//
// The update re-checks what the report was decided from (I7): the step's state, and the lease
// the report is fenced by. The run's row lock already keeps both as read; if the update ever
// finds otherwise, it writes nothing, nor does anything gated on it, and Report answers
// ErrStaleAssignment.
const (
	reportStepUpdate = `
    UPDATE steps SET state = @state::text, tries = @tries::int, exit_code = @exit_code::int,
        message = @message::text, output = @output::text, epoch = @epoch::bigint,
        started_at = CASE WHEN @state::text = 'RUNNING' THEN now()
                          WHEN @state::text = 'PENDING' THEN NULL ELSE started_at END,
        finished_at = CASE WHEN @state::text IN ('PENDING', 'RUNNING') THEN NULL ELSE now() END
    WHERE run_id = @run_id::text AND step_id = @step_id::text AND state = @prev::text
      AND EXISTS (SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = @run_id::text
                  AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = @role::text)
    RETURNING step_id`
	reportNextSteps = `
       (SELECT coalesce(json_agg(json_build_object('run_id', run_id, 'step_id', step_id, 'spec', spec,
                'state', 'PENDING', 'runnable', true, 'cancel', false) ORDER BY ordinal), '[]')
          FROM steps WHERE run_id = @run_id::text AND step_id = ANY (@next::text[]))`
)

// reportStepSQL applies a report that changes its step only (started, a retry): the usual
// half of all reports, and a fifth of the statement below to start up.
const reportStepSQL = `
/* report: step */
WITH step AS (` + reportStepUpdate + `
)
SELECT (SELECT count(*) FROM step), 0::bigint,` + reportNextSteps

// reportWriteSQL applies what Report decided, in one statement: the step, the dependents it
// skips, the lease it releases, the settle.
const reportWriteSQL = `
/* report: write */
WITH step AS (` + reportStepUpdate + `
), skipped AS (
    UPDATE steps SET state = 'SKIPPED', finished_at = now()
    WHERE run_id = @run_id::text AND step_id = ANY (@skip::text[]) AND state = 'PENDING'
      AND EXISTS (SELECT 1 FROM step)
), freed AS (
    DELETE FROM leases WHERE run_id = @run_id::text AND (role = ANY (@release::text[]) OR @settle::text <> '')
      AND EXISTS (SELECT 1 FROM step)
    RETURNING node_id
), settled AS (
    UPDATE runs SET state = @settle::text, reason = @reason::text, finished_at = now(), deadline_at = NULL
    WHERE run_id = @run_id::text AND @settle::text <> '' AND state = 'RUNNING' AND EXISTS (SELECT 1 FROM step)
    RETURNING attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT @run_id::text, @attempt::int, 'settled', 'RUNNING', @settle::text, @reason::text, NULL FROM settled
    UNION ALL
    SELECT @run_id::text, @attempt::int, 'released', 'RUNNING', 'RUNNING', NULL, node_id
    FROM freed WHERE @settle::text = ''
)
SELECT (SELECT count(*) FROM step), (SELECT count(*) FROM freed),` + reportNextSteps

// Report applies a node's report on one step (SPEC.md §5, Result), all in one transaction:
// the step, the dependents of a failed step (SKIPPED), the node's lease once its steps are all
// final (partial release), and the run once every step is (settle). The caller wakes the
// queue after it when the report released a lease.
func (s *Store) Report(ctx context.Context, p ReportParams) (ReportResult, error) {
	var lr lockedRun
	var res ReportResult
	err := s.pipelinedTx(ctx,
		func(b *pgx.Batch) { queueLockRun(b, lockTarget{RunID: p.RunID, NodeID: p.NodeID}, &lr) },
		func(b *pgx.Batch) error { return planReport(lr, p, b, &res) })
	return res, err
}

// planReport decides what the report does to the run as locked, puts the answer in res and
// queues the write (nothing when the report changes nothing).
func planReport(lr lockedRun, p ReportParams, b *pgx.Batch, res *ReportResult) error {
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
	// node, any node repeating another's report got 200 (found by the hostile-input catalogue).
	if st.Epoch != nil && *st.Epoch == p.Epoch && st.NodeID == p.NodeID && st.State == want && sameCode(st.ExitCode, p.ExitCode, want) {
		*res = ReportResult{StepState: st.State, RunState: runState, Next: []NodeStep{}}
		return nil
	}
	if runState != Running || epoch == nil || *epoch != p.Epoch || *boot != p.BootID || *role != st.Role {
		return ErrStaleAssignment
	}
	if Terminal(st.State) {
		return ErrResultConflict
	}
	d, err := decide(steps, i, p, cancelling)
	if err != nil {
		return err
	}
	*res = ReportResult{StepState: d.state, RunState: runState, Settled: d.settle}
	if d.settle != "" {
		res.RunState = d.settle
	}
	write := reportWriteSQL
	if len(d.skip) == 0 && len(d.release) == 0 && d.settle == "" {
		write = reportStepSQL
	}
	b.Queue(write, named{
		"run_id": p.RunID, "step_id": p.StepID, "state": d.state, "tries": d.tries,
		"exit_code": p.ExitCode, "message": p.Message, "output": p.Output, "epoch": p.Epoch,
		"skip": d.skip, "release": d.release, "settle": d.settle, "reason": nullIfEmpty(d.reason),
		"attempt": attempt, "next": d.next(st.Role),
		"prev": st.State, "node_id": p.NodeID, "boot_id": p.BootID, "role": st.Role,
	}).QueryRow(func(row pgx.Row) error {
		var wrote int
		if err := row.Scan(&wrote, &res.Released, &res.Next); err != nil {
			return err
		}
		if wrote == 0 {
			return ErrStaleAssignment // the step or the lease was not as decided: nothing written
		}
		res.CapacityAppeared = res.Released > 0
		return nil
	})
	return nil
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

func decide(steps []reportStep, i int, p ReportParams, cancelling bool) (decision, error) {
	st := steps[i]
	d := decision{tries: st.Tries}
	switch p.Status {
	case ReportStarted:
		if st.State == Running {
			return decision{}, ErrResultConflict // started under another epoch
		}
		if cancelling || !runnable(steps, st) {
			return decision{}, ErrNotRunnable
		}
		d.state, d.tries = Running, st.Tries+1
	case ReportSucceeded, ReportFailed:
		if st.State != Running {
			return decision{}, ErrNotRunnable // report started first
		}
		d.state = reportedState(p.Status)
		if p.Status == ReportFailed && st.Tries <= st.Retries && !cancelling {
			d.state = Pending // a retry: back on the same node, nothing freed
		}
	case ReportCancelled:
		d.state = Cancelled
	}
	d.after = slices.Clone(steps)
	d.after[i].State, d.after[i].Tries = d.state, d.tries
	if d.state == Failed || d.state == Cancelled {
		d.skip = dependents(d.after, st.ID)
		for j := range d.after {
			if slices.Contains(d.skip, d.after[j].ID) {
				d.after[j].State = Skipped
			}
		}
	}
	if !Terminal(d.state) {
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
	if !slices.ContainsFunc(steps, func(s reportStep) bool { return s.State != Succeeded }) {
		return Succeeded, ""
	}
	if cancelling {
		return Cancelled, ReasonCancelled
	}
	return Failed, ReasonStepFailed
}

// dependents are the PENDING steps that wait, directly or not, for step id.
func dependents(steps []reportStep, id string) []string {
	var out []string
	frontier := []string{id}
	for len(frontier) > 0 {
		cur := frontier[0]
		frontier = frontier[1:]
		for _, s := range steps {
			if s.State == Pending && slices.Contains(s.After, cur) && !slices.Contains(out, s.ID) {
				out = append(out, s.ID)
				frontier = append(frontier, s.ID)
			}
		}
	}
	return out
}

func runnable(steps []reportStep, st reportStep) bool {
	for _, dep := range st.After {
		if j := slices.IndexFunc(steps, func(s reportStep) bool { return s.ID == dep }); j < 0 || steps[j].State != Succeeded {
			return false
		}
	}
	return true
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
		if (role == "" || s.Role == role) && !Terminal(s.State) {
			return false
		}
	}
	return true
}

// next are the role's steps that can start once this report is in.
func (d decision) next(role string) []string {
	out := []string{}
	for _, s := range d.after {
		if s.Role == role && s.State == Pending && runnable(d.after, s) {
			out = append(out, s.ID)
		}
	}
	return out
}

func reportedState(status string) string {
	switch status {
	case ReportStarted:
		return Running
	case ReportSucceeded:
		return Succeeded
	case ReportFailed:
		return Failed
	case ReportCancelled:
		return Cancelled
	}
	return ""
}

// sameCode: a terminal report repeated must carry the same exit code to be the same report.
func sameCode(stored, reported *int, state string) bool {
	if !Terminal(state) {
		return true
	}
	if stored == nil || reported == nil {
		return stored == nil && reported == nil
	}
	return *stored == *reported
}

package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"mediator/shared/wire"
)

// Step logs: the chunks are objects in S3 (shared/steplogs builds their keys and URLs); the
// store decides who may write them — the node running the step, under its lease — and keeps
// what terminal reports said of them (step_logs, written by Report).

var (
	logUploadTargetStmt = stmt("log_upload_target")
	stepLogFactsStmt    = stmt("step_log_facts")
)

// LogUploadTarget is where the node of p may upload the log of the step it runs, fenced as a
// report is: the step RUNNING under the lease the node holds, at p's boot and epoch. A run or
// step that does not exist is ErrNotFound; anything else not so is ErrStaleAssignment, and the
// node gets no URLs.
//
// One statement, so one transaction of its own: it writes nothing, and what it read may change
// the moment it answers — which is why a URL names the lease's attempt, try and epoch, and a
// reader of a later lease's log never lists them.
func (s *Store) LogUploadTarget(ctx context.Context, p wire.LogURLs) (LogTarget, error) {
	t := LogTarget{RunKey: p.RunID, StepID: p.StepID, Epoch: p.Epoch}
	var fenced bool
	err := logUploadTargetStmt.queryRow(ctx, s.pool, named{
		"run_id": p.RunID, "step_id": p.StepID, "node_id": p.NodeID, "boot_id": p.BootID, "epoch": p.Epoch,
	}).Scan(&t.Owner, &t.Attempt, &t.Try, &fenced)
	if err != nil {
		return LogTarget{}, err
	}
	if !fenced {
		return LogTarget{}, ErrStaleAssignment
	}
	return t, nil
}

// StepLogParams name a step's log as a reader does: the run as GET /v1/runs/{run_id} names it,
// the step, and the attempt (0 for the run's latest).
type StepLogParams struct {
	Run     RunRef
	StepID  string
	Attempt int
}

// StepLogFacts is what the database knows of the log p names. A run the viewer may not see, a
// step it does not have, or an attempt it has not reached is ErrNotFound.
func (s *Store) StepLogFacts(ctx context.Context, p StepLogParams) (StepLogFacts, error) {
	return inTx(ctx, s, func(tx pgx.Tx) (StepLogFacts, error) {
		key, err := resolve(ctx, tx, p.Run)
		if err != nil {
			return StepLogFacts{}, err
		}
		var f StepLogFacts
		var state string
		var epoch *int64
		var tries int
		var logState, sha *string
		var bytes *int64
		var uploaded *bool
		err = stepLogFactsStmt.queryRow(ctx, tx, named{"key": key, "step_id": p.StepID, "attempt": p.Attempt}).
			Scan(&f.RunID, &f.Owner, &f.RunKey, &f.Attempt, &state, &epoch, &tries, &logState, &bytes, &sha, &uploaded)
		if err != nil {
			return StepLogFacts{}, err
		}
		f.StepID = p.StepID
		switch latest := f.Attempt; {
		case p.Attempt > latest:
			return StepLogFacts{}, ErrNotFound
		case p.Attempt == 0 || p.Attempt == latest:
			f.Current, f.State, f.Epoch, f.Tries = true, state, epoch, tries
		default:
			f.Attempt, f.State = p.Attempt, wire.Cancelled
			if logState != nil {
				f.State = *logState
			}
		}
		if bytes != nil {
			f.Summary = &LogSummary{Bytes: *bytes, SHA256: *sha, Uploaded: *uploaded}
		}
		return f, nil
	})
}

package apitest

// CopyRun stores n copies of a finished run the handlers stored, with its roles, steps and
// history, as the runs <prefix>1 … <prefix>n, copy i arriving i milliseconds before the run
// (its other times moved with it): a database of thousands of runs, each row one the handlers
// wrote, in the time a test has — thousands of submits would take all of it. Only a finished
// run is copied: a copy of a live one would be a run no node holds, or one the queue's order
// puts ahead of runs that were there first.
func (e *Env) CopyRun(runID, prefix string, n int) {
	e.T.Helper()
	if e.Count(`SELECT count(*) FROM runs WHERE run_id = $1 AND finished_at IS NOT NULL`, runID) != 1 {
		e.T.Fatalf("CopyRun: %s is not a finished run", runID)
	}
	e.Exec(`WITH copies AS (
		SELECT $2::text || i AS run_id, i * interval '1 millisecond' AS shift FROM generate_series(1, $3::int) i
	), runs AS (
		INSERT INTO runs (run_id, name, owner, state, reason, request_hash, shape, width, attempt, max_attempts,
			timeout_seconds, queue_timeout_seconds, wait_for_capacity, metadata, priority,
			created_at, started_at, finished_at, deadline_at, cancel_requested_at, cancel_reason)
		SELECT c.run_id, c.run_id, r.owner, r.state, r.reason, r.request_hash, r.shape, r.width, r.attempt, r.max_attempts,
			r.timeout_seconds, r.queue_timeout_seconds, r.wait_for_capacity, r.metadata, r.priority,
			r.created_at - c.shift, r.started_at - c.shift, r.finished_at - c.shift,
			r.deadline_at - c.shift, r.cancel_requested_at - c.shift, r.cancel_reason
		FROM runs r, copies c WHERE r.run_id = $1
	), roles AS (
		INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
		SELECT c.run_id, ro.role, ro.ordinal, ro.needs, ro.node_id FROM run_roles ro, copies c WHERE ro.run_id = $1
	), steps AS (
		INSERT INTO steps (run_id, step_id, role, ordinal, after, spec, retries, tries, state, exit_code, message,
			output, epoch, started_at, finished_at, outputs)
		SELECT c.run_id, s.step_id, s.role, s.ordinal, s.after, s.spec, s.retries, s.tries, s.state, s.exit_code, s.message,
			s.output, s.epoch, s.started_at - c.shift, s.finished_at - c.shift, s.outputs
		FROM steps s, copies c WHERE s.run_id = $1
	)
	INSERT INTO run_events (run_id, at, attempt, kind, from_state, to_state, reason, node_id)
	SELECT c.run_id, ev.at - c.shift, ev.attempt, ev.kind, ev.from_state, ev.to_state, ev.reason, ev.node_id
	FROM run_events ev, copies c WHERE ev.run_id = $1 ORDER BY c.shift DESC, ev.event_id`, runID, prefix, n)
}

-- Ending runs: a cancel, the reaper's deadlines, the unservable sweep.

-- fragment: end_runs
-- Ends the runs of a CTE due (run_id rows, locked by the statement that selects them: the
-- decision is made inside the statement that acts on it, so there is no window between reading
-- what is due and ending it, I7). Every step that is not final becomes final, every lease is
-- released, each run gets its event (a hold its hold_ended too) — one statement, so one
-- transaction. It answers how many runs ended, the nodes whose leases it freed, and how many
-- ended runs were queued and protected (their nodes may serve younger runs now).
run AS (
    UPDATE runs r SET state = @end_state::text, reason = @end_reason::text, finished_at = now(), deadline_at = NULL,
        cancel_requested_at = CASE WHEN @end_state::text = {{CANCELLED}}
                                   THEN coalesce(r.cancel_requested_at, now()) ELSE r.cancel_requested_at END,
        cancel_reason = coalesce(r.cancel_reason, @cancel_reason::text)
    FROM due WHERE r.run_id = due.run_id AND r.state = @end_from::text
    RETURNING r.run_id, r.attempt, r.kind, @end_from::text = {{QUEUED}} AND {{protected r}} AS unblocks
), steps AS (
    -- epoch NULL: no node reported this end, so a node's report of it is fenced (409), not
    -- taken for a repeat of one.
    UPDATE steps s SET state = CASE WHEN s.state = {{PENDING}} THEN @pending_to::text ELSE {{CANCELLED}} END,
        finished_at = now(), epoch = NULL
    FROM run WHERE s.run_id = run.run_id AND s.state IN ({{PENDING}}, {{RUNNING}})
), freed AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id RETURNING l.node_id
), event AS (
    -- A hold's end is its notice too (hold_ended, holds.sql).
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, attempt, @end_kind::text, @end_from::text, @end_state::text, @end_reason::text FROM run
    UNION ALL
    SELECT run_id, attempt, 'hold_ended', @end_from::text, @end_state::text, @end_reason::text
    FROM run WHERE kind = {{KIND_HOLD}}
)
SELECT (SELECT count(*) FROM run), (SELECT coalesce(array_agg(node_id), '{}') FROM freed), (SELECT count(*) FROM run WHERE unblocks)

-- name: end_cancelled
-- A cancel that settles at once: a queued run, a forced cancel, a run with nothing running.
/* cancel: settle */
WITH due AS (SELECT run_id FROM runs WHERE run_id = @run_id::text FOR UPDATE), {{end_runs}}

-- name: end_cancel_grace
-- Cancels no node acknowledged within CANCEL_GRACE.
/* reap: cancel grace */
WITH due AS (
    SELECT run_id FROM runs WHERE state = {{RUNNING}}
      AND cancel_requested_at < now() - @grace::float8 * interval '1 second'
    ORDER BY cancel_requested_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), {{end_runs}}

-- name: end_timed_out
-- Runs past timeout_seconds.
/* reap: timeouts */
WITH due AS (
    SELECT run_id FROM runs WHERE state = {{RUNNING}} AND deadline_at < now()
    ORDER BY deadline_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), {{end_runs}}

-- name: end_queue_timed_out
-- Queued runs past queue_timeout_seconds.
/* reap: queue timeouts */
WITH due AS (
    SELECT run_id FROM runs WHERE state = {{QUEUED}} AND deadline_at < now()
    ORDER BY deadline_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), {{end_runs}}

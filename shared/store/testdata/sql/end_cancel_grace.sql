/* reap: cancel grace */
WITH due AS (
    SELECT run_id FROM runs WHERE state = 'RUNNING'
      AND cancel_requested_at < now() - @grace::float8 * interval '1 second'
    ORDER BY cancel_requested_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), run AS (
    UPDATE runs r SET state = @end_state::text, reason = @end_reason::text, finished_at = now(), deadline_at = NULL,
        cancel_requested_at = CASE WHEN @end_state::text = 'CANCELLED'
                                   THEN coalesce(r.cancel_requested_at, now()) ELSE r.cancel_requested_at END,
        cancel_reason = coalesce(r.cancel_reason, @cancel_reason::text)
    FROM due WHERE r.run_id = due.run_id AND r.state = @end_from::text
    RETURNING r.run_id, r.attempt, r.kind, @end_from::text = 'QUEUED' AND r.created_at < now() - @starvation::float8 * interval '1 second' AS unblocks
), steps AS (
    UPDATE steps s SET state = CASE WHEN s.state = 'PENDING' THEN @pending_to::text ELSE 'CANCELLED' END,
        finished_at = now(), epoch = NULL
    FROM run WHERE s.run_id = run.run_id AND s.state IN ('PENDING', 'RUNNING')
), freed AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id RETURNING l.node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, attempt, @end_kind::text, @end_from::text, @end_state::text, @end_reason::text FROM run
    UNION ALL
    SELECT run_id, attempt, 'hold_ended', @end_from::text, @end_state::text, @end_reason::text
    FROM run WHERE kind = 'hold'
)
SELECT (SELECT count(*) FROM run), (SELECT coalesce(array_agg(node_id), '{}') FROM freed), (SELECT count(*) FROM run WHERE unblocks)

/* reap: holds ending */
WITH due AS (
    SELECT run_id FROM runs
    WHERE state = 'RUNNING' AND kind = 'hold'
      AND hold_ends_at > now() AND hold_ends_at <= now() + @lead::float8 * interval '1 second'
      AND hold_warned_for IS DISTINCT FROM hold_ends_at
    ORDER BY hold_ends_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), warned AS (
    UPDATE runs r SET hold_warned_for = r.hold_ends_at FROM due
    WHERE r.run_id = due.run_id AND r.state = 'RUNNING'
    RETURNING r.run_id, r.attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'hold_expiring', 'RUNNING', 'RUNNING' FROM warned
)
SELECT count(*) FROM warned

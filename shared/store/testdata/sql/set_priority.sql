/* runs: priority */
WITH run AS (
    UPDATE runs SET priority = @priority::smallint
    WHERE run_id = @run_id::text AND state = 'QUEUED' AND priority <> @priority::smallint
    RETURNING run_id, attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'priority_changed', 'QUEUED', 'QUEUED' FROM run
)
SELECT count(*) FROM run

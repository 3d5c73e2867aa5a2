/* holds: extend */
WITH moved AS (
    UPDATE runs SET
        hold_ends_at = CASE WHEN state = 'RUNNING'
            THEN greatest(hold_ends_at, least(hold_ends_at + @seconds::int * interval '1 second',
                                              now() + @max_hold::int * interval '1 second'))
            ELSE hold_ends_at END,
        hold_seconds = CASE WHEN state = 'QUEUED' THEN greatest(hold_seconds, least(hold_seconds + @seconds::int, @max_hold::int))
            ELSE hold_seconds END
    WHERE run_id = @run_id::text AND kind = 'hold' AND state IN ('QUEUED', 'RUNNING')
    RETURNING run_id, attempt, state
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'hold_extended', state, state FROM moved
)
SELECT count(*) FROM moved

/* cancel: request */
WITH run AS (
    UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, now()),
        cancel_reason = coalesce(cancel_reason, @reason::text)
    WHERE run_id = @run_id::text AND state = 'RUNNING'
    RETURNING attempt
), pending AS (
    UPDATE steps SET state = 'CANCELLED', finished_at = now(), epoch = NULL
    WHERE run_id = @run_id::text AND state = 'PENDING' AND EXISTS (SELECT 1 FROM run)
), freed AS (
    DELETE FROM leases WHERE run_id = @run_id::text AND role = ANY (@release::text[])
      AND EXISTS (SELECT 1 FROM run)
    RETURNING node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT @run_id::text, attempt, 'cancel_requested', 'RUNNING', 'RUNNING', NULL, NULL FROM run WHERE @first::bool
    UNION ALL
    SELECT @run_id::text, attempt, 'released', 'RUNNING', 'RUNNING', NULL, f.node_id FROM run, freed f
)
SELECT count(*) FROM freed

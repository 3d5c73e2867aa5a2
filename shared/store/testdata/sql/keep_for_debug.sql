/* report: keep for debug */
WITH failed AS (
    SELECT r.run_id, r.owner, r.priority, r.keep_on_failure_seconds AS seconds FROM runs r
    WHERE r.run_id = @run_id::text AND r.state = 'FAILED' AND r.reason = 'step_failed'
      AND r.keep_on_failure_seconds IS NOT NULL AND r.debug_hold IS NULL
), kept AS (
    DELETE FROM leases l USING failed f WHERE l.run_id = f.run_id AND l.role = ANY (@keep::text[])
    RETURNING l.node_id, l.role, l.boot_id
), hold AS (
    INSERT INTO runs (run_id, name, owner, state, priority, request_hash, shape, width, max_attempts, kind,
        hold_seconds, hold_ends_at, started_at, debug_of)
    SELECT @hold_id::text, @hold_id::text, f.owner, 'RUNNING', f.priority, '\x'::bytea,
        (SELECT '[' || string_agg('["' || 'node_id=' || k.node_id || '"]', ',' ORDER BY k.node_id) || ']' FROM kept k),
        (SELECT count(*) FROM kept), 1, 'hold', f.seconds, now() + f.seconds * interval '1 second', now(), f.run_id
    FROM failed f WHERE EXISTS (SELECT 1 FROM kept)
    RETURNING run_id, attempt, state, kind
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT h.run_id, k.role, row_number() OVER (ORDER BY k.role), ARRAY['node_id=' || k.node_id], k.node_id
    FROM hold h CROSS JOIN kept k
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT k.node_id, h.run_id, k.role, k.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM hold h CROSS JOIN kept k
), named AS (
    UPDATE runs r SET debug_hold = h.run_id FROM hold h WHERE r.run_id = @run_id::text
), run AS (SELECT * FROM hold
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, 1, 'submitted', NULL, 'RUNNING', NULL FROM hold
    UNION ALL
    SELECT run_id, attempt, 'hold_placed', 'RUNNING', 'RUNNING', NULL FROM run
    WHERE state = 'RUNNING' AND kind = 'hold'
)
SELECT (SELECT run_id FROM hold)

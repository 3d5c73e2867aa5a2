/* health: schedule periodic checks */
WITH wanted AS (
    SELECT DISTINCT ON (n.node_id) n.node_id, c.name, c.needs, c.steps
    FROM health_checks c JOIN nodes n ON n.labels @> c.needs
    WHERE c.every_seconds IS NOT NULL AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND n.check_run_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.check_node = n.node_id AND r.check_name = c.name
                      AND r.created_at > now() - c.every_seconds * interval '1 second')
    ORDER BY n.node_id, cardinality(c.needs) DESC, c.name
    LIMIT @batch::int
), due AS (
    SELECT n.node_id, w.name, w.needs, w.steps, left(w.name, 48) || '.' || left(n.node_id, 64) || '.' || substr(md5(random()::text || clock_timestamp()::text), 1, 12) AS run_id
    FROM nodes n JOIN wanted w ON w.node_id = n.node_id
    WHERE n.check_run_id IS NULL
    FOR NO KEY UPDATE OF n SKIP LOCKED
), run AS (
    INSERT INTO runs (run_id, name, owner, state, priority, request_hash, shape, width, max_attempts,
        timeout_seconds, kind, check_name, check_node)
    SELECT d.run_id, d.run_id, 'system', 'QUEUED', 100, '\x'::bytea, 'check:' || d.run_id, 1, 1,
        1800, 'health_check', d.name, d.node_id
    FROM due d
    RETURNING run_id
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT d.run_id, 'node', 1, d.needs || ('node_id=' || d.node_id), '' FROM due d
), check_steps AS (
    INSERT INTO steps (run_id, run_kind, step_id, role, ordinal, after, spec, retries, state)
    SELECT d.run_id, 'health_check', s.id, s.role, s.ord - 1, coalesce(s.after, '{}'), s.spec, coalesce(s.retries, 0), 'PENDING'
    FROM due d CROSS JOIN LATERAL ROWS FROM (
        jsonb_to_recordset(d.steps) AS (id text, role text, after text[], spec jsonb, retries int)
    ) WITH ORDINALITY AS s(id, role, after, spec, retries, ord)
), reserved AS (
    UPDATE nodes n SET check_run_id = d.run_id FROM due d WHERE n.node_id = d.node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT d.run_id, 1, 'submitted', NULL, 'QUEUED' FROM due d
)
SELECT count(*) FROM due

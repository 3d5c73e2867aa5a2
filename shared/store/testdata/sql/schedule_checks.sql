/* health: schedule checks */
WITH due AS (
    SELECT n.node_id, c.name, c.needs, c.steps, left(c.name, 48) || '.' || left(n.node_id, 64) || '.' || substr(md5(random()::text || clock_timestamp()::text), 1, 12) AS run_id
    FROM nodes n CROSS JOIN LATERAL (SELECT c.name, c.needs, c.steps FROM health_checks c WHERE n.labels @> c.needs
 ORDER BY cardinality(c.needs) DESC, c.name LIMIT 1) c
    WHERE n.node_id = ANY (@nodes::text[]) AND n.health = 'suspect' AND n.check_run_id IS NULL
    FOR NO KEY UPDATE OF n
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

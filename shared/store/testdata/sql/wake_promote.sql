/* wake: promote */
WITH keyed AS (
    SELECT n.node_id, n.boot_id FROM nodes n
    WHERE n.node_id = ANY (@nodes::text[]) AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND (n.check_run_id IS NULL OR n.check_run_id = @check_run::text)
    FOR KEY SHARE OF n SKIP LOCKED
), slot AS (
    SELECT a.ord, a.need, n.node_id, n.boot_id
    FROM unnest(@needs::text[], @nodes::text[]) WITH ORDINALITY AS a(need, node_id, ord)
    JOIN keyed n ON n.node_id = a.node_id
JOIN free_nodes f ON f.node_id = a.node_id
WHERE f.node_id = ANY (ARRAY(SELECT node_id FROM keyed))
FOR UPDATE OF f SKIP LOCKED
), pick AS (
    SELECT r.run_id, r.width FROM runs r
    WHERE r.state = 'QUEUED' AND r.shape = @head_shape::text AND NOT (r.queue_rank, r.created_at, r.run_id) < (@head_queue_rank, @head_created_at, @head_run_id)
      AND (SELECT count(*) FROM slot) = cardinality(@nodes::text[]) -- the nodes first
    ORDER BY r.shape, r.queue_rank, r.created_at, r.run_id LIMIT 1
    FOR UPDATE SKIP LOCKED
), role AS (
    SELECT ro.role, array_to_string(ro.needs, ',') AS need,
           row_number() OVER (ORDER BY array_to_string(ro.needs, ',') COLLATE "C", ro.role COLLATE "C") AS ord
    FROM run_roles ro WHERE ro.run_id = (SELECT run_id FROM pick)
), assign AS (
    SELECT r.role, s.node_id, s.boot_id FROM role r JOIN slot s ON s.ord = r.ord AND s.need = r.need
), run AS (
    UPDATE runs r SET state = 'RUNNING', started_at = now(),
        deadline_at = now() + r.timeout_seconds * interval '1 second', hold_ends_at = now() + r.hold_seconds * interval '1 second'
    FROM pick WHERE r.run_id = pick.run_id AND r.state = 'QUEUED' AND pick.width = (SELECT count(*) FROM assign)
    RETURNING r.run_id, r.attempt, r.created_at, r.queue_rank, r.started_at, r.state, r.kind
), roles AS (
    UPDATE run_roles ro SET node_id = a.node_id FROM run, assign a
    WHERE ro.run_id = run.run_id AND ro.role = a.role
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN assign a
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, attempt, 'promoted', 'QUEUED', 'RUNNING', NULL FROM run
    UNION ALL
    SELECT run_id, attempt, 'hold_placed', 'RUNNING', 'RUNNING', NULL FROM run
    WHERE state = 'RUNNING' AND kind = 'hold'
)
SELECT (SELECT coalesce(array_agg(node_id), '{}') FROM slot), run.run_id, run.created_at, run.queue_rank,
       run.started_at, (SELECT array_agg(a.role ORDER BY a.role) FROM assign a WHERE run.run_id IS NOT NULL),
       (SELECT array_agg(a.node_id ORDER BY a.role) FROM assign a WHERE run.run_id IS NOT NULL)
FROM (SELECT 1) one LEFT JOIN run ON true

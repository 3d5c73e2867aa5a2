/* wake: start */
WITH RECURSIVE shapes(shape) AS (
    (SELECT shape FROM runs WHERE state = 'QUEUED' ORDER BY shape LIMIT 1)
    UNION ALL
    SELECT (SELECT r.shape FROM runs r WHERE r.state = 'QUEUED' AND r.shape > s.shape ORDER BY r.shape LIMIT 1)
    FROM shapes s WHERE s.shape IS NOT NULL
), heads AS (
    SELECT h.* FROM shapes s CROSS JOIN LATERAL (
        SELECT r.run_id, r.shape, r.created_at, r.queue_rank, r.created_at < now() - 600::float8 * interval '1 second',
(SELECT json_agg(json_build_object('Name', ro.role, 'Needs', ro.needs) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id) FROM runs r WHERE r.run_id = coalesce(
    (SELECT o.run_id FROM runs o WHERE o.state = 'QUEUED' AND o.shape = s.shape AND o.created_at < now() - 600::float8 * interval '1 second'
     ORDER BY o.shape, o.created_at, o.run_id LIMIT 1),
    (SELECT p.run_id FROM runs p WHERE p.state = 'QUEUED' AND p.shape = s.shape
     ORDER BY p.shape, p.queue_rank, p.created_at, p.run_id LIMIT 1)) OFFSET 0
    ) h(run_id, shape, created_at, queue_rank, protected, roles)
    WHERE s.shape IS NOT NULL
), needs AS (
    SELECT DISTINCT ro.needs FROM heads h
    CROSS JOIN LATERAL (SELECT needs FROM run_roles ro WHERE ro.run_id = h.run_id OFFSET 0) ro
), free AS (
    SELECT n.node_id, n.labels, (n.health = 'suspect') AS suspect, n.check_run_id FROM free_nodes f JOIN nodes n ON n.node_id = f.node_id
    WHERE EXISTS (SELECT 1 FROM heads) AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND ((f.held_until IS NULL OR f.held_until <= now()) OR f.node_id = ANY ('{}'::text[]))
      AND EXISTS (SELECT 1 FROM needs WHERE n.labels @> needs.needs)
    LIMIT 32
)
SELECT true, h.run_id, h.shape, h.created_at, h.queue_rank, h.protected, h.roles, NULL::text[],
       (WITH p AS (
     SELECT o.run_id, o.created_at, o.queue_rank FROM runs o
     WHERE o.state = 'QUEUED' AND o.shape = h.shape AND o.created_at < now() - 600::float8 * interval '1 second' AND o.run_id <> h.run_id
     ORDER BY o.shape, o.created_at, o.run_id LIMIT (SELECT count(*) + 1 FROM free)
 ), q AS (
     SELECT o.run_id, o.created_at, o.queue_rank FROM runs o
     WHERE o.state = 'QUEUED' AND o.shape = h.shape AND NOT o.created_at < now() - 600::float8 * interval '1 second' AND o.run_id <> h.run_id
     ORDER BY o.shape, o.queue_rank, o.created_at, o.run_id LIMIT (SELECT count(*) + 1 FROM free) - (SELECT count(*) FROM p)
 )
 SELECT coalesce(json_agg(json_build_object('RunID', b.run_id, 'CreatedAt', b.created_at,
            'QueueRank', b.queue_rank, 'Protected', b.part = 0) ORDER BY b.part, b.o), '[]')
 FROM (SELECT p.*, 0 AS part, row_number() OVER (ORDER BY p.created_at, p.run_id) AS o FROM p
       UNION ALL
       SELECT q.*, 1, row_number() OVER (ORDER BY q.queue_rank, q.created_at, q.run_id) FROM q) b), NULL::bool, NULL::text
FROM heads h WHERE EXISTS (SELECT 1 FROM free)
UNION ALL
SELECT false, f.node_id, NULL, NULL, NULL, NULL, NULL, f.labels, NULL, f.suspect, f.check_run_id FROM free f

/* waiting */
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
), asked AS (
    SELECT w.grp, w.ord, string_to_array(w.need, ',') AS labels
    FROM unnest(@groups::text[], @needs::text[]) WITH ORDINALITY AS w(grp, need, ord)
), want AS (
    SELECT a.*, count(*) OVER (PARTITION BY a.grp) = 1 AS single FROM asked a
    UNION ALL
    SELECT DISTINCT ON (array_to_string(ro.needs, ',')) array_to_string(ro.needs, ','), 0, ro.needs, true
    FROM heads h CROSS JOIN LATERAL (SELECT ro.needs FROM run_roles ro WHERE ro.run_id = h.run_id OFFSET 0) ro
    WHERE NOT EXISTS (SELECT 1 FROM asked a WHERE a.grp = array_to_string(ro.needs, ','))
), capable AS (
    SELECT w.grp, n.node_id, n.labels, CASE WHEN n.advert_expires_at <= now() THEN 'offline'
     WHEN (n.health = 'quarantined') THEN 'quarantined'
     WHEN (n.draining OR n.drain_requested_by IS NOT NULL) THEN 'draining'
     WHEN o.kind = 'hold' THEN 'held'
     WHEN o.kind = 'health_check' THEN 'checking'
     WHEN l.run_id IS NOT NULL THEN 'busy'
     WHEN NOT n.check_run_id IS NULL THEN 'checking'
     ELSE 'available' END AS standing, (n.health = 'suspect') AS suspect, n.check_run_id,
           l.run_id IS NULL AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AS free, o.name AS run_name, o.owner AS run_owner
    FROM want w JOIN nodes n ON n.labels @> w.labels
    LEFT JOIN leases l ON l.node_id = n.node_id
    LEFT JOIN LATERAL (SELECT o.name, o.owner, o.kind FROM runs o WHERE o.run_id = l.run_id OFFSET 0) o ON true
    WHERE w.single OR NOT EXISTS (SELECT 1 FROM want e WHERE e.grp = w.grp AND e.ord < w.ord AND n.labels @> e.labels)
)
SELECT true, h.run_id, h.shape, h.created_at, h.queue_rank, h.protected, h.roles,
       NULL::text, NULL::text, NULL::int, NULL::text[], NULL::text[], NULL::json, NULL::int
FROM heads h
UNION ALL
SELECT false, NULL, NULL, NULL, NULL, NULL, NULL, c.grp, c.standing, count(*)::int,
       (array_agg(c.run_name) FILTER (WHERE c.standing = 'busy' AND (@admin::bool OR c.run_owner = @owner::text)))[1:10],
       (array_agg(c.run_owner) FILTER (WHERE c.standing = 'busy' AND (@admin::bool OR c.run_owner = @owner::text)))[1:10],
       to_json((array_agg(json_build_object('ID', c.node_id, 'Labels', c.labels, 'Suspect', c.suspect,
                    'ReservedFor', coalesce(c.check_run_id, ''))) FILTER (WHERE c.free))
               [1:least(1000, @widest::int + (SELECT coalesce(sum(json_array_length(h.roles)), 0) FROM heads h))]),
       NULL
FROM capable c GROUP BY c.grp, c.standing
UNION ALL
SELECT false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, count(*)::int, NULL, NULL, NULL,
       (count(*) FILTER (WHERE n.advert_expires_at > now()))::int
FROM nodes n WHERE @fleet::bool

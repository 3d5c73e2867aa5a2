/* submit: candidates */
WITH walk1 AS (
    SELECT * FROM (
        (SELECT n.node_id, n.labels, true AS available, n.suspect
         FROM (SELECT f.node_id FROM free_nodes f WHERE f.spread >= $2 AND (f.held_until IS NULL OR f.held_until <= now()) ORDER BY f.spread LIMIT 64) f
         CROSS JOIN LATERAL (SELECT n.node_id, n.labels, (n.health = 'suspect') AS suspect FROM nodes n WHERE n.node_id = f.node_id
             AND n.labels @> $1::text[] AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND n.check_run_id IS NULL OFFSET 0) n)
        UNION ALL
        (SELECT n.node_id, n.labels, true AS available, n.suspect
         FROM (SELECT f.node_id FROM free_nodes f WHERE f.spread < $2 AND (f.held_until IS NULL OR f.held_until <= now()) ORDER BY f.spread LIMIT 64) f
         CROSS JOIN LATERAL (SELECT n.node_id, n.labels, (n.health = 'suspect') AS suspect FROM nodes n WHERE n.node_id = f.node_id
             AND n.labels @> $1::text[] AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND n.check_run_id IS NULL OFFSET 0) n)
    ) w LIMIT 3)
SELECT DISTINCT ON (c.node_id) c.node_id, c.labels, c.available, c.suspect,
       EXISTS (SELECT 1 FROM runs WHERE state = 'QUEUED')
FROM (
    SELECT * FROM walk1
    UNION ALL
    (SELECT n.node_id, n.labels, true, (n.health = 'suspect') FROM nodes n
     WHERE (SELECT count(*) FROM walk1) < 3
       AND n.labels @> $1::text[] AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND n.check_run_id IS NULL
       AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id AND (f.held_until IS NULL OR f.held_until <= now()))
     LIMIT 3)
    UNION ALL
    (SELECT n.node_id, n.labels, false, (n.health = 'suspect') FROM nodes n
     WHERE (SELECT count(*) FROM walk1) < 1 AND n.labels @> $1::text[]
     LIMIT 3)
) c
ORDER BY c.node_id, c.available DESC

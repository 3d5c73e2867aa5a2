/* nodes: list */
SELECT n.node_id, CASE WHEN l.run_id IS NOT NULL THEN 'leased'
     WHEN n.advert_expires_at <= now() THEN 'offline'
     WHEN (n.draining OR n.drain_requested_by IS NOT NULL) THEN 'draining'
     ELSE 'idle' END, n.labels, n.boot_id, (n.draining OR n.drain_requested_by IS NOT NULL), n.drain_requested_by, n.last_seen_at,
n.health, n.health_reason, n.infra_failures, n.health_since, n.quarantined_by, NOT n.check_run_id IS NULL,
(SELECT h.name FROM runs h WHERE h.run_id = l.run_id) AS run_name,
(SELECT h.owner FROM runs h WHERE h.run_id = l.run_id) AS run_owner,
(SELECT h.kind FROM runs h WHERE h.run_id = l.run_id) AS run_kind, l.role, l.granted_at
FROM nodes n LEFT JOIN leases l ON l.node_id = n.node_id
WHERE n.node_id > @after::text
ORDER BY n.node_id
LIMIT @limit::int

/* health: admin quarantine */
WITH o AS (
    SELECT node_id, health FROM nodes
    WHERE node_id = @node_id::text AND (quarantined_by IS NULL OR quarantined_by NOT LIKE 'admin:%')
    FOR NO KEY UPDATE
), moved AS (
    UPDATE nodes n SET health = 'quarantined', quarantined_by = @by::text, health_reason = @reason::text,
        health_since = CASE WHEN o.health = 'quarantined' THEN n.health_since ELSE now() END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, @by::text AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS (INSERT INTO node_history (node_id, kind, from_state, to_state, reason, by)
SELECT c.node_id, 'health', c.from_health, c.to_health, c.health_reason, c.by FROM health_changes c
WHERE c.from_health <> c.to_health
)
SELECT v.node_id, CASE WHEN l.run_id IS NOT NULL THEN 'leased'
     WHEN v.advert_expires_at <= now() THEN 'offline'
     WHEN (v.draining OR v.drain_requested_by IS NOT NULL) THEN 'draining'
     ELSE 'idle' END, v.labels, v.boot_id, (v.draining OR v.drain_requested_by IS NOT NULL), v.drain_requested_by, v.last_seen_at,
v.health, v.health_reason, v.infra_failures, v.health_since, v.quarantined_by, NOT v.check_run_id IS NULL,
(SELECT h.name FROM runs h WHERE h.run_id = l.run_id) AS run_name,
(SELECT h.owner FROM runs h WHERE h.run_id = l.run_id) AS run_owner,
(SELECT h.kind FROM runs h WHERE h.run_id = l.run_id) AS run_kind, l.role, l.granted_at, false
FROM (SELECT * FROM moved UNION ALL SELECT * FROM nodes WHERE node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM moved)) v
LEFT JOIN leases l ON l.node_id = v.node_id

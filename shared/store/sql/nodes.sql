-- The heartbeat, and what a node is told.

-- fragment: lease_steps(lease)
-- The steps a lease gives its node (lease: a row with run_id and role), as JSON, with what
-- the node may do about each.
(SELECT coalesce(json_agg({{node_step s r}} ORDER BY s.ordinal), '[]')
     FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.role = lease.role
     WHERE r.run_id = lease.run_id AND s.state IN ({{PENDING}}, {{RUNNING}}))

-- name: heartbeat
-- The whole routine heartbeat in one statement, so one round trip: register or refresh the
-- advert, renew the lease held under this boot, read the node's steps.
--
-- It writes only what is due. The advert and the lease are renewed unless the last renewal is
-- less than @slack old, and the advert is rewritten at once when it changed: a node that polls
-- faster than that costs reads, not commits (a commit is a WAL flush: one per heartbeat, and
-- polling agents would starve everything else of them).
--
-- An idle node's routine heartbeat — the same boot, labels and drain, its advert still live,
-- no lease renewed, none under another boot: nothing written but its advert's times and the
-- pulse — commits without waiting for its WAL flush (@defer_flush, for a heartbeat that is its
-- transaction's only statement; DESIGN.md, "An idle node's heartbeat"). A crash of the database
-- can lose only such a write, which the node's next heartbeat makes again. Every other
-- heartbeat waits for its flush: a lease renewal told to a node is never lost, which the
-- agent's guard depends on.
--
-- The advert is only written when no lease is held under another boot (stale is empty). A
-- restart has to release that lease in the same transaction as the boot changes — the deferred
-- FK leases_held_under_current_boot refuses anything else — and that needs the run's row lock
-- first, so it goes through heartbeatAfterRestart instead.
/* heartbeat */
WITH prev AS (
    SELECT node_id, labels, boot_id, draining, last_seen_at, advert_expires_at, drain_requested_by,
           health, health_reason, infra_failures, health_since, quarantined_by, check_run_id
    FROM nodes WHERE node_id = @node_id::text
), stale AS (
    SELECT run_id, epoch FROM leases WHERE node_id = @node_id::text AND boot_id <> @boot_id::text
), fresh AS (
    SELECT 1 FROM prev WHERE boot_id = @boot_id::text AND labels = @labels::text[] AND draining = @draining::bool
      AND advert_expires_at > now() + (@advert_ttl::float8 - @slack::float8) * interval '1 second'
), ins AS (
    -- A node whose agent says at once that its checks fail is born quarantined by itself, so
    -- that no wake places on it between its registration and its quarantine (selfQuarantine).
    -- Its health starts at the insert's own moment, not its transaction's: a restart's
    -- transaction may have begun before the node it re-registers was removed, and the history
    -- of the removed node — kept — must end before the new node's health began.
    INSERT INTO nodes (node_id, labels, boot_id, draining, advert_expires_at, last_seen_at, health, quarantined_by, health_reason, health_since)
    SELECT @node_id::text, @labels::text[], @boot_id::text, @draining::bool,
           now() + @advert_ttl::float8 * interval '1 second', now(),
           CASE WHEN @unhealthy::text = '' THEN {{HEALTHY}} ELSE {{QUARANTINED}} END,
           CASE WHEN @unhealthy::text <> '' THEN {{by_self}} END, nullif(@unhealthy::text, ''), clock_timestamp()
    WHERE NOT EXISTS (SELECT 1 FROM prev)
    RETURNING node_id, labels, boot_id, draining, last_seen_at, advert_expires_at, drain_requested_by,
        health, health_reason, infra_failures, health_since, quarantined_by, check_run_id
), upd AS (
    UPDATE nodes SET labels = @labels::text[], boot_id = @boot_id::text, draining = @draining::bool,
        advert_expires_at = now() + @advert_ttl::float8 * interval '1 second', last_seen_at = now()
    WHERE node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM fresh) AND NOT EXISTS (SELECT 1 FROM stale)
    RETURNING node_id, labels, boot_id, draining, last_seen_at, advert_expires_at, drain_requested_by,
        health, health_reason, infra_failures, health_since, quarantined_by, check_run_id
), node AS (
    SELECT * FROM ins
    UNION ALL SELECT * FROM upd
    UNION ALL SELECT * FROM prev WHERE EXISTS (SELECT 1 FROM fresh)
), pulse AS (
    -- The system accepted a heartbeat (see heartbeat_pulse): at most one write a second, and
    -- never a wait — a heartbeat that finds the row being written leaves it to that one.
    UPDATE heartbeat_pulse p SET heard_at = now(),
        quiet_from = CASE WHEN p.heard_at < now() - @lease_ttl::float8 * interval '1 second' THEN p.heard_at ELSE p.quiet_from END,
        quiet_until = CASE WHEN p.heard_at < now() - @lease_ttl::float8 * interval '1 second' THEN now() ELSE p.quiet_until END
    WHERE p.only_row AND p.only_row IN (SELECT only_row FROM heartbeat_pulse WHERE only_row
                         AND coalesce(heard_at < now() - @slack::float8 * interval '1 second', true)
                         FOR UPDATE SKIP LOCKED)
), held AS (
    SELECT run_id, role, epoch, expires_at FROM leases
    WHERE node_id = @node_id::text AND boot_id = @boot_id::text AND EXISTS (SELECT 1 FROM node)
), renew AS (
    UPDATE leases SET expires_at = now() + @lease_ttl::float8 * interval '1 second'
    WHERE node_id = @node_id::text AND boot_id = @boot_id::text AND EXISTS (SELECT 1 FROM node)
      AND expires_at < now() + (@lease_ttl::float8 - @slack::float8) * interval '1 second'
    RETURNING run_id, role, epoch, expires_at
), lease AS (
    SELECT * FROM renew UNION ALL SELECT * FROM held WHERE NOT EXISTS (SELECT 1 FROM renew)
)
SELECT
    EXISTS (SELECT 1 FROM stale),
    -- What makes the node newly usable. A new boot counts even on a free node: a promotion
    -- that chose it under the old boot is refused at its COMMIT (leases_held_under_current_boot)
    -- once this commits, and its wake does not come back; this heartbeat's wake stands in.
    coalesce((SELECT advert_expires_at <= now() OR draining AND NOT @draining::bool OR labels <> @labels::text[]
                     OR boot_id <> @boot_id::text FROM prev), true),
    node.node_id, {{node_state node lease}}, node.labels, node.boot_id, {{drained node}}, node.drain_requested_by,
    node.last_seen_at, {{node_health node}},
    lease.run_id, lease.epoch, lease.expires_at,
    -- A debug hold's run: its agent keeps that run's failed step directories while it lasts.
    (SELECT d.debug_of FROM runs d WHERE d.run_id = lease.run_id),
    {{lease_steps lease}},
    -- The setting is the transaction's own (is_local): it ends at this statement's commit and
    -- never reaches the connection's next transaction. CASE, not AND: only CASE promises that
    -- set_config runs only when the heartbeat is routine.
    CASE WHEN @defer_flush::bool AND NOT EXISTS (SELECT 1 FROM stale) AND NOT EXISTS (SELECT 1 FROM renew)
              AND EXISTS (SELECT 1 FROM prev WHERE boot_id = @boot_id::text AND labels = @labels::text[]
                                               AND draining = @draining::bool AND advert_expires_at > now())
         THEN set_config('synchronous_commit', 'off', true) = 'off' ELSE false END
FROM (SELECT 1) one
LEFT JOIN node ON true
LEFT JOIN lease ON true

-- name: heartbeat_lock_node
-- A restart locks its node first: node, then run, then lease is the order every writer keeps
-- (lock.go).
/* heartbeat: lock the node */
SELECT 1 FROM nodes WHERE node_id = $1 FOR UPDATE

-- name: heartbeat_stale_leases
/* heartbeat: leases under another boot */
SELECT node_id, epoch FROM leases WHERE node_id = $1 AND boot_id <> $2

-- name: node_work
-- The lease a node holds under its boot, and the steps it gives.
/* node work */
SELECT lease.run_id, lease.epoch, lease.expires_at, {{lease_steps lease}}
FROM leases lease WHERE lease.node_id = $1 AND lease.boot_id = $2

-- fragment: node_health(n)
-- A node's health as its view shows it (Node in types.go).
n.health, n.health_reason, n.infra_failures, n.health_since, n.quarantined_by, NOT {{unreserved n}}

-- fragment: node_view(n, l)
-- A node as GET /v1/nodes shows it (Node in types.go); l is its lease, if any, with the run
-- that holds it by the name its owner chose.
n.node_id, {{node_state n l}}, n.labels, n.boot_id, {{drained n}}, n.drain_requested_by, n.last_seen_at,
{{node_health n}},
(SELECT h.name FROM runs h WHERE h.run_id = l.run_id) AS run_name,
(SELECT h.owner FROM runs h WHERE h.run_id = l.run_id) AS run_owner,
(SELECT h.kind FROM runs h WHERE h.run_id = l.run_id) AS run_kind, l.role, l.granted_at

-- name: list_nodes
-- The fleet in node_id order from after @after (every node for ''), @limit of them (NULL: all).
/* nodes: list */
SELECT {{node_view n l}}
FROM nodes n LEFT JOIN leases l ON l.node_id = n.node_id
WHERE n.node_id > @after::text
ORDER BY n.node_id
LIMIT @limit::int

-- name: drain_node
-- An admin's drain: the first asker is kept. No wake: it makes no room.
/* nodes: drain */
WITH n AS (
    UPDATE nodes SET drain_requested_by = coalesce(drain_requested_by, @by::text),
        drain_requested_at = coalesce(drain_requested_at, now())
    WHERE node_id = @node_id::text
    RETURNING *
)
SELECT {{node_view n l}} FROM n LEFT JOIN leases l ON l.node_id = n.node_id

-- name: undrain_node
-- Lifts an admin's drain (not the node's own, which its heartbeat says). It answers whether
-- there was one: then the node may be newly available, and the caller wakes.
/* nodes: undrain */
WITH prev AS (
    SELECT node_id, drain_requested_by FROM nodes WHERE node_id = @node_id::text
), n AS (
    UPDATE nodes SET drain_requested_by = NULL, drain_requested_at = NULL
    WHERE node_id = @node_id::text
    RETURNING *
)
SELECT {{node_view n l}}, (SELECT drain_requested_by IS NOT NULL FROM prev)
FROM n LEFT JOIN leases l ON l.node_id = n.node_id

-- name: list_leases
-- alive is judged by the lease alone.
/* leases: list */
SELECT node_id, run_id, role, epoch, expires_at, expires_at > now()
FROM leases ORDER BY node_id

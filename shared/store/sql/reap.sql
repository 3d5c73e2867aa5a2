-- The reaper's own statements (its ends of runs are in settle.sql, its retirement in fleet.sql).

-- name: outage_grace
-- Gives the leases a fresh TTL when the system itself accepted no heartbeat for longer than a
-- lease — still silent now, or a silence that ended less than a lease ago — and no grace was
-- granted since the silence began: once per outage, so a fleet whose only node died is reaped
-- one TTL later all the same. It renews the leases last renewed before the silence ended (all
-- of them while it lasts): a node that heartbeated since is not waiting for the system, and if
-- it died since, it is reaped on time. One dead node in a live fleet is no silence at all.
-- (WHERE only_row tells the planner there is one row: guessing a page's worth, it would cost
-- the statement high enough to JIT-compile it, which takes far longer than the statement.)
/* reap: outage grace */
WITH p AS (
    SELECT CASE WHEN heard_at < now() - @ttl::float8 * interval '1 second' THEN heard_at
                WHEN quiet_until > now() - @ttl::float8 * interval '1 second' THEN quiet_from
           END AS silent_since,
           CASE WHEN heard_at < now() - @ttl::float8 * interval '1 second' THEN now() ELSE quiet_until END AS silent_until,
           graced_at
    FROM heartbeat_pulse WHERE only_row FOR UPDATE
), granted AS (
    UPDATE heartbeat_pulse SET graced_at = now() FROM p
    WHERE only_row AND p.silent_since IS NOT NULL AND (p.graced_at IS NULL OR p.graced_at < p.silent_since)
      AND EXISTS (SELECT 1 FROM leases WHERE expires_at < p.silent_until + @ttl::float8 * interval '1 second')
    RETURNING p.silent_since, p.silent_until
), renewed AS (
    UPDATE leases l SET expires_at = greatest(l.expires_at, now() + @ttl::float8 * interval '1 second')
    FROM granted g WHERE l.expires_at < g.silent_until + @ttl::float8 * interval '1 second'
    RETURNING l.node_id
)
SELECT (SELECT count(*) FROM renewed),
       (SELECT count(*) FROM leases l, granted g WHERE l.expires_at < now()
          AND l.expires_at < g.silent_until + @ttl::float8 * interval '1 second'),
       coalesce((SELECT extract(epoch FROM silent_until - silent_since)::float8 FROM granted), 0)

-- name: expired_leases
/* reap: expired leases */
SELECT node_id, epoch FROM leases WHERE expires_at < now() ORDER BY expires_at LIMIT $1

-- name: schema_version
/* schema version */
SELECT version, dirty FROM schema_migrations LIMIT 1

-- name: prune_node_history
-- A batch of node history past retention goes, oldest first, but for a health change still to
-- publish.
/* reap: prune node history */
DELETE FROM node_history WHERE event_id IN (
    SELECT h.event_id FROM node_history h
    WHERE h.at < now() - @days::int * interval '1 day'
      AND NOT EXISTS (SELECT 1 FROM node_events_unpublished u WHERE u.event_id = h.event_id)
    ORDER BY h.at LIMIT @batch::int)

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

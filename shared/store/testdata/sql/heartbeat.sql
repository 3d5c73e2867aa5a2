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
    INSERT INTO nodes (node_id, labels, boot_id, draining, advert_expires_at, last_seen_at, health, quarantined_by, health_reason, health_since)
    SELECT @node_id::text, @labels::text[], @boot_id::text, @draining::bool,
           now() + @advert_ttl::float8 * interval '1 second', now(),
           CASE WHEN @unhealthy::text = '' THEN 'healthy' ELSE 'quarantined' END,
           CASE WHEN @unhealthy::text <> '' THEN 'self' END, nullif(@unhealthy::text, ''), clock_timestamp()
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
    coalesce((SELECT advert_expires_at <= now() OR draining AND NOT @draining::bool OR labels <> @labels::text[]
                     OR boot_id <> @boot_id::text FROM prev), true),
    node.node_id, CASE WHEN lease.run_id IS NOT NULL THEN 'leased'
     WHEN node.advert_expires_at <= now() THEN 'offline'
     WHEN (node.draining OR node.drain_requested_by IS NOT NULL) THEN 'draining'
     ELSE 'idle' END, node.labels, node.boot_id, (node.draining OR node.drain_requested_by IS NOT NULL), node.drain_requested_by,
    node.last_seen_at, node.health, node.health_reason, node.infra_failures, node.health_since, node.quarantined_by, NOT node.check_run_id IS NULL,
    lease.run_id, lease.epoch, lease.expires_at,
    (SELECT d.debug_of FROM runs d WHERE d.run_id = lease.run_id),
    (SELECT coalesce(json_agg(json_build_object('run_id', s.run_id, 'step_id', s.step_id, 'role', s.role, 'attempt', r.attempt,
    'spec', s.spec, 'state', s.state, 'runnable', s.state = 'PENDING' AND r.cancel_requested_at IS NULL AND NOT EXISTS (
    SELECT 1 FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after) AND d.state <> 'SUCCEEDED'), 'cancel', r.cancel_requested_at IS NOT NULL,
    'keep_on_failure', r.keep_on_failure_seconds IS NOT NULL,
    'assigned', (SELECT coalesce(json_object_agg(ro.role, ro.node_id ORDER BY ro.ordinal), '{}')
                 FROM run_roles ro WHERE ro.run_id = s.run_id AND ro.node_id <> ''),
    'inputs', (SELECT coalesce(json_object_agg(d.step_id, coalesce(d.outputs, '{}') ORDER BY d.ordinal), '{}')
               FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after))) ORDER BY s.ordinal), '[]')
     FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.role = lease.role
     WHERE r.run_id = lease.run_id AND s.state IN ('PENDING', 'RUNNING')),
    CASE WHEN @defer_flush::bool AND NOT EXISTS (SELECT 1 FROM stale) AND NOT EXISTS (SELECT 1 FROM renew)
              AND EXISTS (SELECT 1 FROM prev WHERE boot_id = @boot_id::text AND labels = @labels::text[]
                                               AND draining = @draining::bool AND advert_expires_at > now())
         THEN set_config('synchronous_commit', 'off', true) = 'off' ELSE false END
FROM (SELECT 1) one
LEFT JOIN node ON true
LEFT JOIN lease ON true

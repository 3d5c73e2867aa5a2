/* lose a lease */
WITH lost AS (
    DELETE FROM leases WHERE node_id = @node_id::text AND epoch = @epoch::bigint
      AND (NOT @only_expired::bool OR expires_at < now())
      AND (@boot_not::text = '' OR boot_id <> @boot_not::text)
    RETURNING run_id, expires_at
), run AS (
    UPDATE runs r SET
        state = CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'CANCELLED'
                     WHEN r.attempt < r.max_attempts THEN 'QUEUED' ELSE 'FAILED' END,
        reason = CASE WHEN r.cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN r.attempt < r.max_attempts THEN NULL ELSE @reason::text END,
        attempt = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                       THEN r.attempt + 1 ELSE r.attempt END,
        started_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                          THEN NULL ELSE r.started_at END,
        deadline_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN now() + r.queue_timeout_seconds * interval '1 second' END,
        finished_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN NULL ELSE now() END
    FROM lost WHERE r.run_id = lost.run_id AND r.state = 'RUNNING'
    RETURNING r.run_id, r.state, r.attempt, r.reason, r.kind
), others AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id AND l.node_id <> @node_id::text
    RETURNING l.node_id
), roles AS (
    UPDATE run_roles ro SET node_id = '' FROM run
    WHERE ro.run_id = run.run_id AND run.state = 'QUEUED'
), steps AS (
    UPDATE steps st SET
        state = CASE WHEN run.state = 'QUEUED' THEN 'PENDING' ELSE 'CANCELLED' END,
        tries = CASE WHEN run.state = 'QUEUED' THEN 0 ELSE st.tries END,
        exit_code = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.exit_code END,
        message = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.message END,
        output = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.output END,
        outputs = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.outputs END,
        epoch = NULL, -- queued: a new attempt; ended: by no report of a node (see end_runs)
        started_at = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE st.started_at END,
        finished_at = CASE WHEN run.state = 'QUEUED' THEN NULL ELSE now() END
    FROM run
    WHERE st.run_id = run.run_id AND (run.state = 'QUEUED' OR st.state IN ('PENDING', 'RUNNING'))
), ev AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT run_id, CASE WHEN state = 'QUEUED' THEN attempt - 1 ELSE attempt END,
           'node_lost', 'RUNNING', state, @reason::text, @node_id::text
    FROM run
    UNION ALL
    SELECT run_id, attempt, 'hold_ended', 'RUNNING', state, reason, @node_id::text
    FROM run WHERE kind = 'hold' AND state <> 'QUEUED'
), excused AS (
    SELECT 1 FROM heartbeat_pulse p, lost
    WHERE p.only_row AND (p.heard_at < now() - @lease_ttl::float8 * interval '1 second'
                          OR lost.expires_at <= p.graced_at + @lease_ttl::float8 * interval '1 second')
), blamed AS (
    SELECT n.node_id, n.health, n.infra_failures FROM nodes n
    WHERE n.node_id = @node_id::text AND @blame::bool AND EXISTS (SELECT 1 FROM run)
      AND NOT EXISTS (SELECT 1 FROM excused)
    FOR NO KEY UPDATE
), health_changes AS (UPDATE nodes n SET infra_failures = n.infra_failures + 1,
    health = CASE WHEN n.health = 'quarantined' THEN n.health
                  WHEN n.infra_failures + 1 >= @quarantine_after::int THEN 'quarantined' ELSE 'suspect' END,
    quarantined_by = CASE WHEN n.health = 'quarantined' THEN n.quarantined_by
                          WHEN n.infra_failures + 1 >= @quarantine_after::int THEN 'system' END,
    health_reason = CASE WHEN n.health = 'quarantined' THEN n.health_reason
                         ELSE left(format('%s consecutive infrastructure failures; the last: %s',
                                          n.infra_failures + 1, @health_message::text), 1024) END,
    health_since = CASE WHEN n.health = 'quarantined'
                          OR (n.health = 'suspect' AND n.infra_failures + 1 < @quarantine_after::int)
                        THEN n.health_since ELSE now() END
FROM blamed WHERE n.node_id = blamed.node_id
RETURNING n.node_id, blamed.health AS from_health, n.health AS to_health, n.health_reason,
          coalesce(n.quarantined_by, 'system') AS by
), history AS (INSERT INTO node_history (node_id, kind, from_state, to_state, reason, by)
SELECT c.node_id, 'health', c.from_health, c.to_health, c.health_reason, c.by FROM health_changes c
WHERE c.from_health <> c.to_health
)
SELECT (SELECT count(*) FROM lost), (SELECT coalesce(array_agg(node_id), '{}') FROM others),
       EXISTS (SELECT 1 FROM health_changes c WHERE c.from_health <> c.to_health)

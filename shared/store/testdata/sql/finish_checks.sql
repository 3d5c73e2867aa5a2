/* health: finish checks */
WITH o AS (
    SELECT n.node_id, n.health, r.state, r.check_name,
           coalesce((SELECT s.step_id || ': ' || coalesce(s.message, 'exit code ' || s.exit_code, s.state)
                     FROM steps s WHERE s.run_id = r.run_id AND s.state = 'FAILED' ORDER BY s.finished_at DESC LIMIT 1),
                    r.reason) AS failure
    FROM nodes n JOIN runs r ON r.run_id = n.check_run_id
    WHERE NOT n.check_run_id IS NULL AND (@all::bool OR n.node_id = ANY (@nodes::text[]))
      AND r.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    FOR NO KEY UPDATE OF n SKIP LOCKED
), moved AS (
    UPDATE nodes n SET check_run_id = NULL,
        health = CASE WHEN n.health = 'quarantined' THEN n.health
                      WHEN o.state = 'SUCCEEDED' THEN 'healthy'
                      WHEN o.state = 'FAILED' THEN 'quarantined' ELSE n.health END,
        infra_failures = CASE WHEN o.state = 'SUCCEEDED' AND n.health <> 'quarantined' THEN 0 ELSE n.infra_failures END,
        quarantined_by = CASE WHEN n.health = 'quarantined' THEN n.quarantined_by
                              WHEN o.state = 'FAILED' THEN 'system' END,
        health_reason = CASE WHEN n.health = 'quarantined' THEN n.health_reason
                             WHEN o.state = 'SUCCEEDED' THEN NULL
                             WHEN o.state = 'FAILED' THEN left(format('health check %s failed: %s', o.check_name, o.failure), 1024)
                             ELSE n.health_reason END,
        health_since = CASE WHEN n.health = 'quarantined' THEN n.health_since
                            WHEN (o.state = 'SUCCEEDED' AND n.health <> 'healthy') OR o.state = 'FAILED' THEN now()
                            ELSE n.health_since END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, 'system' AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS (INSERT INTO node_history (node_id, kind, from_state, to_state, reason, by)
SELECT c.node_id, 'health', c.from_health, c.to_health, c.health_reason, c.by FROM health_changes c
WHERE c.from_health <> c.to_health
)
SELECT (SELECT coalesce(array_agg(c.node_id ORDER BY c.node_id), '{}') FROM health_changes c WHERE c.from_health <> c.to_health),
       (SELECT coalesce(array_agg(m.node_id ORDER BY m.node_id), '{}') FROM moved m WHERE m.advert_expires_at > now() AND NOT (m.draining OR m.drain_requested_by IS NOT NULL) AND NOT (m.health = 'quarantined'))

/* report: health */
WITH o AS (
    SELECT n.node_id, n.health, n.infra_failures FROM nodes n
    WHERE n.node_id = @health_node::text
      AND EXISTS (SELECT 1 FROM steps s WHERE s.run_id = @run_id::text AND s.step_id = @step_id::text
                  AND s.state = @state::text AND s.epoch = @epoch::bigint)
      AND (@infra::bool OR n.infra_failures > 0 OR n.health = 'suspect')
    FOR NO KEY UPDATE
), blamed AS (SELECT * FROM o WHERE @infra::bool
), credited AS (SELECT * FROM o WHERE NOT @infra::bool
), counted AS (UPDATE nodes n SET infra_failures = n.infra_failures + 1,
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
), reset AS (UPDATE nodes n SET infra_failures = 0,
    health = CASE WHEN n.health = 'suspect' THEN 'healthy' ELSE n.health END,
    health_reason = CASE WHEN n.health = 'suspect' THEN NULL ELSE n.health_reason END,
    health_since = CASE WHEN n.health = 'suspect' THEN now() ELSE n.health_since END
FROM credited c WHERE n.node_id = c.node_id AND c.health <> 'quarantined' AND (c.infra_failures > 0 OR c.health = 'suspect')
RETURNING n.node_id, c.health AS from_health, n.health AS to_health, n.health_reason, 'system' AS by
), health_changes AS (
    SELECT * FROM counted UNION ALL SELECT * FROM reset
), history AS (INSERT INTO node_history (node_id, kind, from_state, to_state, reason, by)
SELECT c.node_id, 'health', c.from_health, c.to_health, c.health_reason, c.by FROM health_changes c
WHERE c.from_health <> c.to_health)
SELECT count(*) FROM health_changes c WHERE c.from_health <> c.to_health

-- A node's health (migration 0015): what counts against it, what resets it, who moves it.
-- Every change is a conditional write on the node's row, locked first (lock.go: node, then run,
-- then lease), and each change of state is a line of node_history, which the outbox publishes.

-- fragment: health_counted
-- One infrastructure failure counted against the node of the caller's CTE blamed (node_id and
-- health of its row, locked): suspect at the first,
-- quarantined by the system at @quarantine_after in a row, with a reason naming the count and the
-- last failure (@health_message, truncated to what the node may carry). A quarantined node — its
-- lease finishing — keeps its quarantine, and who made it.
UPDATE nodes n SET infra_failures = n.infra_failures + 1,
    health = CASE WHEN n.health = {{QUARANTINED}} THEN n.health
                  WHEN n.infra_failures + 1 >= @quarantine_after::int THEN {{QUARANTINED}} ELSE {{SUSPECT}} END,
    quarantined_by = CASE WHEN n.health = {{QUARANTINED}} THEN n.quarantined_by
                          WHEN n.infra_failures + 1 >= @quarantine_after::int THEN {{by_system}} END,
    health_reason = CASE WHEN n.health = {{QUARANTINED}} THEN n.health_reason
                         ELSE left(format('%s consecutive infrastructure failures; the last: %s',
                                          n.infra_failures + 1, @health_message::text), 1024) END,
    health_since = CASE WHEN n.health = {{QUARANTINED}}
                          OR (n.health = {{SUSPECT}} AND n.infra_failures + 1 < @quarantine_after::int)
                        THEN n.health_since ELSE now() END
FROM blamed WHERE n.node_id = blamed.node_id
RETURNING n.node_id, blamed.health AS from_health, n.health AS to_health, n.health_reason,
          coalesce(n.quarantined_by, {{by_system}}) AS by

-- fragment: health_reset
-- A success on the node of the caller's CTE credited (node_id, health and infra_failures of its
-- row, locked): its count starts over, and a suspect node is
-- healthy again. A quarantine is lifted only by whoever may lift it, never by a run finishing.
UPDATE nodes n SET infra_failures = 0,
    health = CASE WHEN n.health = {{SUSPECT}} THEN {{HEALTHY}} ELSE n.health END,
    health_reason = CASE WHEN n.health = {{SUSPECT}} THEN NULL ELSE n.health_reason END,
    health_since = CASE WHEN n.health = {{SUSPECT}} THEN now() ELSE n.health_since END
FROM credited c WHERE n.node_id = c.node_id AND c.health <> {{QUARANTINED}} AND (c.infra_failures > 0 OR c.health = {{SUSPECT}})
RETURNING n.node_id, c.health AS from_health, n.health AS to_health, n.health_reason, {{by_system}} AS by

-- fragment: health_history
-- The changes of the caller's CTE health_changes (node_id, from_health, to_health,
-- health_reason, by) that changed a node's state, as lines of its history (and so events: node_events_mark_unpublished).
INSERT INTO node_history (node_id, kind, from_state, to_state, reason, by)
SELECT c.node_id, 'health', c.from_health, c.to_health, c.health_reason, c.by FROM health_changes c
WHERE c.from_health <> c.to_health

-- name: report_lock_node
-- A report that may change its node's health, or end the health check due on it (run $3),
-- locks the node before the run (lock.go): an infrastructure failure always ($2), a success
-- only when there is a count to reset.
/* report: lock the node */
SELECT 1 FROM nodes WHERE node_id = $1 AND ($2::bool OR infra_failures > 0 OR health = {{SUSPECT}} OR check_run_id = $3::text)
FOR NO KEY UPDATE

-- name: report_health
-- What the report does to its node's health, once its step is written as decided (the write's
-- own re-checks decide whether it was: a refused write leaves the step as it was, and this
-- changes nothing): @infra, a failure counted; else a success, the count reset.
/* report: health */
WITH o AS (
    SELECT n.node_id, n.health, n.infra_failures FROM nodes n
    WHERE n.node_id = @health_node::text
      AND EXISTS (SELECT 1 FROM steps s WHERE s.run_id = @run_id::text AND s.step_id = @step_id::text
                  AND s.state = @state::text AND s.epoch = @epoch::bigint)
      AND (@infra::bool OR n.infra_failures > 0 OR n.health = {{SUSPECT}})
    FOR NO KEY UPDATE
), blamed AS (SELECT * FROM o WHERE @infra::bool
), credited AS (SELECT * FROM o WHERE NOT @infra::bool
), counted AS ({{health_counted}}
), reset AS ({{health_reset}}
), health_changes AS (
    SELECT * FROM counted UNION ALL SELECT * FROM reset
), history AS ({{health_history}})
SELECT count(*) FROM health_changes c WHERE c.from_health <> c.to_health

-- name: self_quarantine
-- The node's agent says its own checks fail (@reason): it quarantines itself, or, quarantined by
-- itself already, says why now. A quarantine of the system's or an admin's stays as it is: the
-- node's say can neither soften nor take it over.
/* health: self quarantine */
WITH o AS (
    SELECT node_id, health FROM nodes
    WHERE node_id = @node_id::text
      AND (health <> {{QUARANTINED}} OR quarantined_by = {{by_self}} AND health_reason IS DISTINCT FROM @reason::text)
    FOR NO KEY UPDATE
), moved AS (
    UPDATE nodes n SET health = {{QUARANTINED}}, quarantined_by = {{by_self}}, health_reason = @reason::text,
        health_since = CASE WHEN o.health = {{QUARANTINED}} THEN n.health_since ELSE now() END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, {{by_self}} AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS ({{health_history}}
)
SELECT {{node_view v l}}, false
FROM (SELECT * FROM moved UNION ALL SELECT * FROM nodes WHERE node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM moved)) v
LEFT JOIN leases l ON l.node_id = v.node_id

-- name: lift_quarantine
-- Makes a node healthy again, its count reset: its agent lifting its own quarantine (@admin
-- false: only a quarantine of its own), or an admin (@admin: any quarantine, and a suspect
-- node's count). An admin's lift of a quarantine on a node a health check applies to makes it
-- suspect instead, for the check to decide (LiftQuarantine schedules it in the same
-- transaction). It answers whether a quarantine was lifted: then the node may be available
-- again, and the caller wakes the queue.
/* health: lift */
WITH o AS (
    SELECT n.node_id, n.health,
           @admin::bool AND n.health = {{QUARANTINED}} AND EXISTS (SELECT 1 FROM {{applicable_check n}} c) AS checked
    FROM nodes n
    WHERE n.node_id = @node_id::text AND (n.health <> {{HEALTHY}} OR n.infra_failures > 0)
      AND (@admin::bool OR n.quarantined_by = {{by_self}})
    FOR NO KEY UPDATE OF n
), moved AS (
    UPDATE nodes n SET quarantined_by = NULL, infra_failures = 0,
        health = CASE WHEN o.checked THEN {{SUSPECT}} ELSE {{HEALTHY}} END,
        health_reason = CASE WHEN o.checked THEN format('quarantine lifted by %s: a health check decides', @by::text) END,
        health_since = CASE WHEN o.health = {{HEALTHY}} THEN n.health_since ELSE now() END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, @by::text AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS ({{health_history}}
)
SELECT {{node_view v l}}, v.was = {{QUARANTINED}}
FROM (SELECT m.*, o.health AS was FROM moved m JOIN o ON o.node_id = m.node_id
      UNION ALL
      SELECT x.*, x.health FROM nodes x WHERE x.node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM moved)) v
LEFT JOIN leases l ON l.node_id = v.node_id

-- name: admin_quarantine
-- An admin quarantines a node (@by): it takes no new lease until an admin lifts it, whatever
-- its agent says. A quarantine of the node's own or the system's becomes the admin's; an
-- admin's stays as the first admin gave it.
/* health: admin quarantine */
WITH o AS (
    SELECT node_id, health FROM nodes
    WHERE node_id = @node_id::text AND (quarantined_by IS NULL OR quarantined_by NOT LIKE 'admin:%')
    FOR NO KEY UPDATE
), moved AS (
    UPDATE nodes n SET health = {{QUARANTINED}}, quarantined_by = @by::text, health_reason = @reason::text,
        health_since = CASE WHEN o.health = {{QUARANTINED}} THEN n.health_since ELSE now() END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, @by::text AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS ({{health_history}}
)
SELECT {{node_view v l}}, false
FROM (SELECT * FROM moved UNION ALL SELECT * FROM nodes WHERE node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM moved)) v
LEFT JOIN leases l ON l.node_id = v.node_id

-- name: node_history
-- A node's recent history, newest first: its health changes and its leases.
/* nodes: history */
SELECT at, kind, from_state, to_state, reason, run_id FROM node_history
WHERE node_id = $1 ORDER BY event_id DESC LIMIT $2

-- name: get_node
/* nodes: get */
SELECT {{node_view n l}} FROM nodes n LEFT JOIN leases l ON l.node_id = n.node_id WHERE n.node_id = $1

-- fragment: health_check_view(c)
-- A health check as its routes show it (HealthCheck in health.go).
c.name, c.needs, c.steps, c.every_seconds

-- name: put_health_check
-- Registers a health check, or replaces it whole; answers it and whether it is new.
/* health checks: put */
INSERT INTO health_checks AS c (name, needs, steps, every_seconds, updated_by)
VALUES (@name::text, @needs::text[], @steps::jsonb, @every_seconds::int, @by::text)
ON CONFLICT ON CONSTRAINT health_checks_pkey DO UPDATE SET needs = excluded.needs, steps = excluded.steps,
    every_seconds = excluded.every_seconds, updated_by = excluded.updated_by, updated_at = now()
RETURNING {{health_check_view c}}, (xmax = 0)

-- name: get_health_check
/* health checks: get */
SELECT {{health_check_view c}} FROM health_checks c WHERE c.name = $1

-- name: list_health_checks
/* health checks: list */
SELECT {{health_check_view c}} FROM health_checks c ORDER BY c.name

-- name: delete_health_check
/* health checks: delete */
DELETE FROM health_checks c WHERE c.name = $1 RETURNING {{health_check_view c}}

-- Placing health checks (migration 0016). A check is due on a node from the moment it is
-- scheduled — a suspect node, a quarantine an admin lifted, a periodic check's time — until its
-- outcome is applied; meanwhile the node serves that run alone (rules.sql unreserved). A run of
-- kind health_check is the system's, its one role pinned to the node (node_id=<id>) with the
-- check's needs, its shape its own, so the wake walks it apart from every client's run.

-- fragment: applicable_check(n)
-- The check that applies to node n, as a LATERAL subquery: of those whose needs its labels
-- hold, the most specific (the most needs), then by name.
(SELECT c.name, c.needs, c.steps FROM health_checks c WHERE n.labels @> c.needs
 ORDER BY cardinality(c.needs) DESC, c.name LIMIT 1)

-- fragment: check_run_id(c, n)
-- A new check run's id (and name) for check c on node n: readable, under the id pattern's 128
-- characters, unique by its random tail.
left(c.name, 48) || '.' || left(n.node_id, 64) || '.' || substr(md5(random()::text || clock_timestamp()::text), 1, 12)

-- fragment: create_check_runs
-- The check runs of the caller's CTE due (node_id, name, needs, steps, run_id; the nodes' rows
-- locked, none of them with a check due): the run, its role, its steps, its event, and the node
-- reserved for it. It answers how many it scheduled.
run AS (
    INSERT INTO runs (run_id, name, owner, state, priority, request_hash, shape, width, max_attempts,
        timeout_seconds, kind, check_name, check_node)
    SELECT d.run_id, d.run_id, {{SYSTEM_OWNER}}, {{QUEUED}}, {{MAX_PRIORITY}}, '\x'::bytea, {{check_shape d}}, 1, 1,
        {{CHECK_TIMEOUT}}, {{KIND_HEALTH_CHECK}}, d.name, d.node_id
    FROM due d
    RETURNING run_id
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT d.run_id, {{CHECK_ROLE}}, 1, d.needs || ({{NODE_ID_LABEL_PREFIX}} || d.node_id), '' FROM due d
), check_steps AS (
    INSERT INTO steps (run_id, run_kind, step_id, role, ordinal, after, spec, retries, state)
    SELECT d.run_id, {{KIND_HEALTH_CHECK}}, s.id, s.role, s.ord - 1, coalesce(s.after, '{}'), s.spec, coalesce(s.retries, 0), {{PENDING}}
    FROM due d CROSS JOIN LATERAL ROWS FROM (
        jsonb_to_recordset(d.steps) AS (id text, role text, after text[], spec jsonb, retries int)
    ) WITH ORDINALITY AS s(id, role, after, spec, retries, ord)
), reserved AS (
    UPDATE nodes n SET check_run_id = d.run_id FROM due d WHERE n.node_id = d.node_id
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT d.run_id, 1, 'submitted', NULL, {{QUEUED}} FROM due d
)
SELECT count(*) FROM due

-- name: schedule_checks
-- A check on each of @nodes that is suspect, has none due, and has a check that applies (a
-- suspect node with none goes on taking work). The caller holds the nodes' rows (lock.go: the
-- node first), or this takes them.
/* health: schedule checks */
WITH due AS (
    SELECT n.node_id, c.name, c.needs, c.steps, {{check_run_id c n}} AS run_id
    FROM nodes n CROSS JOIN LATERAL {{applicable_check n}} c
    WHERE n.node_id = ANY (@nodes::text[]) AND n.health = {{SUSPECT}} AND {{unreserved n}}
    FOR NO KEY UPDATE OF n
), {{create_check_runs}}

-- name: schedule_periodic_checks
-- The periodic checks due: on each node taking work with none due, a check with every_seconds
-- that applies to it (of several, the most specific, then by name) whose last run on the node
-- began longer ago than that, or never. Up to @batch nodes, skipping a node another writer
-- holds: the next reap takes it.
/* health: schedule periodic checks */
WITH wanted AS (
    SELECT DISTINCT ON (n.node_id) n.node_id, c.name, c.needs, c.steps
    FROM health_checks c JOIN nodes n ON n.labels @> c.needs
    WHERE c.every_seconds IS NOT NULL AND {{takes_work n}} AND {{unreserved n}}
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.check_node = n.node_id AND r.check_name = c.name
                      AND r.created_at > now() - c.every_seconds * interval '1 second')
    ORDER BY n.node_id, cardinality(c.needs) DESC, c.name
    LIMIT @batch::int
), due AS (
    SELECT n.node_id, w.name, w.needs, w.steps, {{check_run_id w n}} AS run_id
    FROM nodes n JOIN wanted w ON w.node_id = n.node_id
    WHERE {{unreserved n}}
    FOR NO KEY UPDATE OF n SKIP LOCKED
), {{create_check_runs}}

-- name: finish_checks
-- Applies the outcome of each check run that ended on a node still reserved for it (@nodes, or
-- @all), and opens the node: SUCCEEDED, healthy with its count reset; FAILED (its steps, its
-- lease, its time), quarantined by the system with the check's failure as the reason;
-- CANCELLED (an admin's cancel), as it was. A node quarantined meanwhile stays as it is. Only
-- the node's row is written: the run has ended and nothing changes it. It answers the nodes whose
-- health it moved (their events are the caller's to publish), and those it opened that take work
-- now, for the caller's wake.
/* health: finish checks */
WITH o AS (
    SELECT n.node_id, n.health, r.state, r.check_name,
           coalesce((SELECT s.step_id || ': ' || coalesce(s.message, 'exit code ' || s.exit_code, s.state)
                     FROM steps s WHERE s.run_id = r.run_id AND s.state = {{FAILED}} ORDER BY s.finished_at DESC LIMIT 1),
                    r.reason) AS failure
    FROM nodes n JOIN runs r ON r.run_id = n.check_run_id
    WHERE NOT {{unreserved n}} AND (@all::bool OR n.node_id = ANY (@nodes::text[]))
      AND r.state IN ({{FINAL_RUN_STATES}})
    FOR NO KEY UPDATE OF n SKIP LOCKED
), moved AS (
    -- A quarantine made meanwhile (the node's own, an admin's) is its maker's to lift: a pass
    -- leaves it, and a failure keeps who made it and why.
    UPDATE nodes n SET check_run_id = NULL,
        health = CASE WHEN n.health = {{QUARANTINED}} THEN n.health
                      WHEN o.state = {{SUCCEEDED}} THEN {{HEALTHY}}
                      WHEN o.state = {{FAILED}} THEN {{QUARANTINED}} ELSE n.health END,
        infra_failures = CASE WHEN o.state = {{SUCCEEDED}} AND n.health <> {{QUARANTINED}} THEN 0 ELSE n.infra_failures END,
        quarantined_by = CASE WHEN n.health = {{QUARANTINED}} THEN n.quarantined_by
                              WHEN o.state = {{FAILED}} THEN {{by_system}} END,
        health_reason = CASE WHEN n.health = {{QUARANTINED}} THEN n.health_reason
                             WHEN o.state = {{SUCCEEDED}} THEN NULL
                             WHEN o.state = {{FAILED}} THEN left(format('health check %s failed: %s', o.check_name, o.failure), 1024)
                             ELSE n.health_reason END,
        health_since = CASE WHEN n.health = {{QUARANTINED}} THEN n.health_since
                            WHEN (o.state = {{SUCCEEDED}} AND n.health <> {{HEALTHY}}) OR o.state = {{FAILED}} THEN now()
                            ELSE n.health_since END
    FROM o WHERE n.node_id = o.node_id
    RETURNING n.*
), health_changes AS (
    SELECT m.node_id, o.health AS from_health, m.health AS to_health, m.health_reason, {{by_system}} AS by
    FROM moved m JOIN o ON o.node_id = m.node_id
), history AS ({{health_history}}
)
SELECT (SELECT coalesce(array_agg(c.node_id ORDER BY c.node_id), '{}') FROM health_changes c WHERE c.from_health <> c.to_health),
       (SELECT coalesce(array_agg(m.node_id ORDER BY m.node_id), '{}') FROM moved m WHERE {{takes_work m}})

/* submit: insert */
WITH key AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = @run_id::text) THEN @taken_key::text
                ELSE @run_id::text END AS key
), keyed AS (
    SELECT n.node_id, n.boot_id FROM nodes n
    WHERE n.node_id = ANY (@nodes::text[]) AND n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND (n.check_run_id IS NULL OR n.check_run_id = @check_run::text)
    FOR KEY SHARE OF n SKIP LOCKED
), avail AS (
    SELECT a.role, n.node_id, n.boot_id
    FROM unnest(@assign_roles::text[], @nodes::text[]) WITH ORDINALITY AS a(role, node_id, ord)
    JOIN keyed n ON n.node_id = a.node_id
JOIN free_nodes f ON f.node_id = a.node_id
WHERE f.node_id = ANY (ARRAY(SELECT node_id FROM keyed))
    ORDER BY a.ord LIMIT @width::int
    FOR UPDATE OF f SKIP LOCKED
), decided AS (
    SELECT CASE WHEN @state::text = 'RUNNING' AND ((SELECT count(*) FROM avail) <> @width::int
                     OR (NOT @behind_queue::bool AND EXISTS (
                         SELECT 1 FROM runs q WHERE q.state = 'QUEUED' AND (q.created_at, q.run_id) < (now(), (SELECT key FROM key))))) THEN 'QUEUED'
                ELSE @state::text END AS state
), run AS (
    INSERT INTO runs (run_id, name, owner, state, reason, priority, request_hash, shape, width, max_attempts,
        timeout_seconds, queue_timeout_seconds, wait_for_capacity, metadata, kind, hold_seconds, hold_ends_at, keep_on_failure_seconds,
        started_at, finished_at, deadline_at)
    SELECT (SELECT key FROM key), @run_id::text, @owner::text, d.state, CASE WHEN d.state = 'FAILED' THEN @reason::text END,
        @priority::smallint, @request_hash::bytea,
        @shape::text, @width::int, @max_attempts::int, @timeout::int, @queue_timeout::int, @wait_for_capacity::bool, @metadata::jsonb,
        @kind::text, @hold_seconds::int, CASE WHEN d.state = 'RUNNING' THEN now() + @new_hold_seconds * interval '1 second' END, @keep_on_failure::int,
        CASE WHEN d.state = 'RUNNING' THEN now() END,
        CASE WHEN d.state = 'FAILED' THEN now() END,
        CASE d.state WHEN 'QUEUED' THEN now() + @queue_timeout::int * interval '1 second'
                     WHEN 'RUNNING' THEN now() + @timeout::int * interval '1 second' END
    FROM decided d
    ON CONFLICT DO NOTHING
    RETURNING run_id, attempt, state, kind, created_at, queue_rank, hold_ends_at
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT run.run_id, r.role, r.ordinal, string_to_array(r.needs, ','),
           CASE WHEN run.state = 'RUNNING' THEN a.node_id ELSE '' END
    FROM run CROSS JOIN unnest(@role_names::text[], @role_needs::text[]) WITH ORDINALITY AS r(role, needs, ordinal)
    LEFT JOIN avail a ON a.role = r.role
), steps AS (
    INSERT INTO steps (run_id, step_id, role, ordinal, after, spec, retries, state, finished_at)
    SELECT run.run_id, s.id, s.role, s.ordinal, s.after, s.spec, s.retries,
           CASE WHEN run.state = 'FAILED' THEN 'SKIPPED' ELSE 'PENDING' END,
           CASE WHEN run.state = 'FAILED' THEN now() END
    FROM run CROSS JOIN jsonb_to_recordset(@steps::jsonb)
        AS s(id text, role text, after text[], spec jsonb, retries int, ordinal int)
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN avail a WHERE run.state = 'RUNNING'
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, 1, 'submitted', NULL, state, CASE WHEN state = 'FAILED' THEN @reason::text END FROM run
    UNION ALL
    SELECT run_id, attempt, 'hold_placed', 'RUNNING', 'RUNNING', NULL FROM run
    WHERE state = 'RUNNING' AND kind = 'hold'
)
SELECT r.state, r.created_at, CASE WHEN r.state = 'QUEUED' THEN
    (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 60
        AND (c.queue_rank, c.bucket) < (r.queue_rank, queue_bucket(r.created_at, 60)))
  + (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 1 AND c.queue_rank = r.queue_rank
        AND c.bucket >= queue_bucket(r.created_at, 60) * 60 AND c.bucket < queue_bucket(r.created_at, 1))
  + (SELECT count(*) FROM runs q WHERE q.state = 'QUEUED' AND q.queue_rank = r.queue_rank
        AND q.created_at >= to_timestamp(queue_bucket(r.created_at, 1)) AND (q.queue_rank, q.created_at, q.run_id) < (r.queue_rank, r.created_at, r.run_id))
END,
       (SELECT array_agg(role) FROM avail), (SELECT array_agg(node_id) FROM avail), r.run_id, r.hold_ends_at
FROM run r

/* runs: list */
WITH page AS MATERIALIZED (
    SELECT r.name, r.run_id, r.owner, r.state, r.reason, r.priority, r.attempt, r.max_attempts, r.created_at, r.started_at,
r.finished_at, r.cancel_requested_at, r.cancel_reason, r.timeout_seconds, r.queue_timeout_seconds,
r.wait_for_capacity, r.metadata, r.kind, r.hold_seconds, r.hold_ends_at,
(SELECT json_agg(json_build_object('name', ro.role, 'needs', ro.needs, 'node_id', ro.node_id) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id) AS roles,
(SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state, 'after', s.after,
        'retries', s.retries, 'tries', s.tries, 'exit_code', s.exit_code, 'message', s.message,
        'started_at', s.started_at, 'finished_at', s.finished_at, 'outputs', s.outputs) ORDER BY s.ordinal)
   FROM steps s WHERE s.run_id = r.run_id) AS steps FROM runs r WHERE r.owner = @owner AND r.state = @state AND (r.created_at, r.name, r.run_id) < (timestamptz 'epoch' + @after_us::bigint * interval '1 microsecond', @after_name::text, @after_key::text)
    ORDER BY r.created_at DESC, r.name DESC, r.run_id DESC LIMIT @limit
), queued AS (
    SELECT q.* FROM runs q WHERE q.run_id IN (SELECT run_id FROM page WHERE state = 'QUEUED')
), lo AS (
    SELECT q.state, q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY q.queue_rank, q.created_at, q.run_id LIMIT 1
), hi AS (
    SELECT q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY q.queue_rank DESC, q.created_at DESC, q.run_id DESC LIMIT 1
), ahead AS (
    SELECT CASE WHEN lo.state = 'QUEUED' THEN
    (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 60
        AND (c.queue_rank, c.bucket) < (lo.queue_rank, queue_bucket(lo.created_at, 60)))
  + (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 1 AND c.queue_rank = lo.queue_rank
        AND c.bucket >= queue_bucket(lo.created_at, 60) * 60 AND c.bucket < queue_bucket(lo.created_at, 1))
  + (SELECT count(*) FROM runs q WHERE q.state = 'QUEUED' AND q.queue_rank = lo.queue_rank
        AND q.created_at >= to_timestamp(queue_bucket(lo.created_at, 1)) AND (q.queue_rank, q.created_at, q.run_id) < (lo.queue_rank, lo.created_at, lo.run_id))
END AS n FROM lo
), ranked AS (
    SELECT q.run_id, row_number() OVER (ORDER BY q.queue_rank, q.created_at, q.run_id) - 1 AS rank
    FROM runs q, lo, hi
    WHERE q.state = 'QUEUED' AND NOT (q.queue_rank, q.created_at, q.run_id) < (lo.queue_rank, lo.created_at, lo.run_id) AND NOT (hi.queue_rank, hi.created_at, hi.run_id) < (q.queue_rank, q.created_at, q.run_id)
)
SELECT p.*, CASE WHEN p.state = 'QUEUED' THEN (SELECT n FROM ahead) + k.rank END
FROM page p LEFT JOIN ranked k ON k.run_id = p.run_id
ORDER BY p.created_at DESC, p.name DESC, p.run_id DESC

/* runs: get of owner */
SELECT r.name, r.run_id, r.owner, r.state, r.reason, r.priority, r.attempt, r.max_attempts, r.created_at, r.started_at,
r.finished_at, r.cancel_requested_at, r.cancel_reason, r.timeout_seconds, r.queue_timeout_seconds,
r.wait_for_capacity, r.metadata, r.kind, r.hold_seconds, r.hold_ends_at,
(SELECT json_agg(json_build_object('name', ro.role, 'needs', ro.needs, 'node_id', ro.node_id) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id) AS roles,
(SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state, 'after', s.after,
        'retries', s.retries, 'tries', s.tries, 'exit_code', s.exit_code, 'message', s.message,
        'started_at', s.started_at, 'finished_at', s.finished_at, 'outputs', s.outputs) ORDER BY s.ordinal)
   FROM steps s WHERE s.run_id = r.run_id) AS steps, CASE WHEN r.state = 'QUEUED' THEN
    (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 60
        AND (c.queue_rank, c.bucket) < (r.queue_rank, queue_bucket(r.created_at, 60)))
  + (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 1 AND c.queue_rank = r.queue_rank
        AND c.bucket >= queue_bucket(r.created_at, 60) * 60 AND c.bucket < queue_bucket(r.created_at, 1))
  + (SELECT count(*) FROM runs q WHERE q.state = 'QUEUED' AND q.queue_rank = r.queue_rank
        AND q.created_at >= to_timestamp(queue_bucket(r.created_at, 1)) AND (q.queue_rank, q.created_at, q.run_id) < (r.queue_rank, r.created_at, r.run_id))
END FROM runs r WHERE r.owner = $1 AND r.name = $2

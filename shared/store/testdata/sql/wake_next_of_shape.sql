/* wake: next of shape */
SELECT r.run_id, r.shape, r.created_at, r.queue_rank, r.created_at < now() - 600::float8 * interval '1 second',
(SELECT json_agg(json_build_object('Name', ro.role, 'Needs', ro.needs) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id) FROM runs r WHERE r.run_id = coalesce(
    (SELECT o.run_id FROM runs o WHERE o.state = 'QUEUED' AND o.shape = @head_shape AND o.created_at < now() - 600::float8 * interval '1 second'
     ORDER BY o.shape, o.created_at, o.run_id LIMIT 1),
    (SELECT p.run_id FROM runs p WHERE p.state = 'QUEUED' AND p.shape = @head_shape
     ORDER BY p.shape, p.queue_rank, p.created_at, p.run_id LIMIT 1))

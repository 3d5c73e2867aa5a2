/* queue: view */
WITH counts AS (
    SELECT c.shape, c.queue_rank, sum(c.delta) AS n FROM queue_counts c WHERE c.span = 60
    GROUP BY c.shape, c.queue_rank HAVING sum(c.delta) > 0
), heads AS (
    SELECT c.shape, c.n, o.* FROM counts c CROSS JOIN LATERAL (
        SELECT q.run_id, q.name, q.owner, q.priority, q.created_at FROM runs q
        WHERE q.state = 'QUEUED' AND q.shape = c.shape AND q.queue_rank = c.queue_rank
        ORDER BY q.queue_rank, q.created_at, q.run_id LIMIT 1) o
)
SELECT h.shape, sum(h.n)::bigint, (array_agg(h.name ORDER BY h.created_at, h.run_id))[1],
       extract(epoch FROM now() - min(h.created_at))::float8,
       (array_agg(h.owner ORDER BY h.created_at, h.run_id))[1],
       json_agg(json_build_object('priority', h.priority, 'queued', h.n) ORDER BY h.priority DESC),
       (SELECT json_agg(ro.needs ORDER BY array_to_string(ro.needs, ',') COLLATE "C") FROM run_roles ro
        WHERE ro.run_id = (array_agg(h.run_id ORDER BY h.created_at, h.run_id))[1])
FROM heads h GROUP BY h.shape ORDER BY min(h.created_at)

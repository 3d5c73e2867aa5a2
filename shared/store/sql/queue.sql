-- name: queue_view
-- The queue by shape (GET /v1/queue): how many wait, the oldest and its owner, how long it has
-- waited, and how many wait at each priority.
/* queue: view */
SELECT r.shape, count(*), (array_agg(r.run_id ORDER BY {{arrival r}}))[1],
       extract(epoch FROM now() - min(r.created_at))::float8,
       (array_agg(r.owner ORDER BY {{arrival r}}))[1],
       (SELECT json_agg(json_build_object('priority', p.priority, 'queued', p.n) ORDER BY p.priority DESC)
          FROM (SELECT q.priority, count(*) AS n FROM runs q WHERE q.state = {{QUEUED}} AND q.shape = r.shape
                GROUP BY q.priority) p)
FROM runs r WHERE r.state = {{QUEUED}} GROUP BY r.shape ORDER BY min(r.created_at)

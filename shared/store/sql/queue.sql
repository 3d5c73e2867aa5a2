-- name: queue_view
-- The queue by shape (GET /v1/queue): how many wait, the first in queue order and its owner,
-- and how long the oldest has waited.
/* queue: view */
SELECT r.shape, count(*), (array_agg(r.run_id ORDER BY {{queue_order r}}))[1],
       extract(epoch FROM now() - min(r.created_at))::float8,
       (array_agg(r.owner ORDER BY {{queue_order r}}))[1]
FROM runs r WHERE r.state = {{QUEUED}} GROUP BY r.shape ORDER BY min(r.created_at)

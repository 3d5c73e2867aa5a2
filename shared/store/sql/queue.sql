-- name: queue_view
-- The queue by shape (GET /v1/queue): how many wait, the oldest (its name) and its owner, how long it has
-- waited, and how many wait at each priority. The counts come from queue_counts' minute rows
-- (migration 0010), and the oldest run of each shape and priority from one index probe each:
-- the view costs what the buckets and the kinds of queued run cost, not the depth.
/* queue: view */
WITH counts AS (
    SELECT c.shape, c.queue_rank, sum(c.delta) AS n FROM queue_counts c WHERE c.span = 60
    GROUP BY c.shape, c.queue_rank HAVING sum(c.delta) > 0
), heads AS (
    SELECT c.shape, c.n, o.* FROM counts c CROSS JOIN LATERAL (
        SELECT q.run_id, q.name, q.owner, q.priority, q.created_at FROM runs q
        WHERE q.state = {{QUEUED}} AND q.shape = c.shape AND q.queue_rank = c.queue_rank
        ORDER BY {{queue_order q}} LIMIT 1) o
)
SELECT h.shape, sum(h.n)::bigint, (array_agg(h.name ORDER BY {{arrival h}}))[1],
       extract(epoch FROM now() - min(h.created_at))::float8,
       (array_agg(h.owner ORDER BY {{arrival h}}))[1],
       json_agg(json_build_object('priority', h.priority, 'queued', h.n) ORDER BY h.priority DESC),
       -- The needs, from the oldest run's roles: a shape is a grouping key, and a health check's
       -- is its own (check:<id>), not a list of needs.
       (SELECT json_agg(ro.needs ORDER BY {{need_key ro}} COLLATE "C") FROM run_roles ro
        WHERE ro.run_id = (array_agg(h.run_id ORDER BY {{arrival h}}))[1])
FROM heads h GROUP BY h.shape ORDER BY min(h.created_at)

-- name: fold_queue_counts
-- The reaper folds each bucket's deltas into one row, and drops the buckets that came to zero,
-- so a read sums one row per bucket. Only buckets holding more than one row are rewritten. Two
-- folds at once are safe: a row the other deleted first is skipped by this DELETE and summed by
-- the other, never by both. Returns how many rows were folded.
/* queue: fold counts */
WITH many AS (
    SELECT span, queue_rank, bucket, shape FROM queue_counts
    GROUP BY span, queue_rank, bucket, shape HAVING count(*) > 1
), folded AS (
    DELETE FROM queue_counts c USING many m
    WHERE (c.span, c.queue_rank, c.bucket, c.shape) = (m.span, m.queue_rank, m.bucket, m.shape)
    RETURNING c.*
), kept AS (
    INSERT INTO queue_counts
    SELECT shape, queue_rank, span, bucket, sum(delta) FROM folded
    GROUP BY shape, queue_rank, span, bucket HAVING sum(delta) <> 0
)
SELECT count(*) FROM folded

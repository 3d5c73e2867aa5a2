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

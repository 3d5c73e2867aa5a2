-- Queue reads that do not grow with the queue. Counting the runs ahead of one, or grouping every
-- queued run for GET /v1/queue, reads the whole queue. queue_counts keeps how many runs are
-- queued per shape and queue rank, at two grains: per minute of arrival (span 60) and per second
-- (span 1). The transaction that moves a run into or out of the queue appends +1 or -1 at both
-- (a trigger, so no writer can forget it; appended, so no row is contended by every submit), and
-- the reaper folds the deltas into one row per bucket. A run's position is then the minutes
-- ahead of its own, the seconds of its own minute ahead of its own, and the runs of its own
-- second ahead of it: bounded by how many buckets hold queued runs and by how many runs arrive
-- in one second, not by the depth.

-- The bucket of an arrival time at a grain: whole spans since the epoch, whatever the session's
-- time zone. The trigger and the store's queue_position both read it, so they cannot disagree.
-- Every function in it is immutable (extract from a timestamptz is only stable), so PostgreSQL
-- inlines it into the statements that call it; not inlined, a submit would call it once per
-- counted row.
CREATE FUNCTION queue_bucket(t timestamptz, span integer) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT floor(extract(epoch FROM t AT TIME ZONE 'UTC') / span)::bigint $$;

CREATE TABLE queue_counts (
    shape      text     NOT NULL,
    queue_rank smallint NOT NULL,
    span       smallint NOT NULL CONSTRAINT queue_counts_span CHECK (span IN (1, 60)),
    bucket     bigint   NOT NULL,
    delta      integer  NOT NULL
);
-- queue_position reads ranges of (queue_rank, bucket) at one grain; the queue view reads every
-- minute row. Both read shape and delta from the index alone.
CREATE INDEX queue_counts_order ON queue_counts (span, queue_rank, bucket) INCLUDE (shape, delta);
-- Every fold deletes most of the table's rows: until a vacuum, a read walks their dead index
-- entries, far more than the live ones, and cannot read the index alone. So autovacuum takes
-- the table after a thousand changed rows, not after a fifth of it.
ALTER TABLE queue_counts SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000);

CREATE FUNCTION runs_count_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'QUEUED' THEN
        IF TG_OP = 'UPDATE' AND NEW.state = 'QUEUED' AND (NEW.shape, NEW.queue_rank, NEW.created_at)
                = (OLD.shape, OLD.queue_rank, OLD.created_at) THEN
            RETURN NULL; -- still queued, in the same place
        END IF;
        INSERT INTO queue_counts VALUES
            (OLD.shape, OLD.queue_rank, 60, queue_bucket(OLD.created_at, 60), -1),
            (OLD.shape, OLD.queue_rank, 1, queue_bucket(OLD.created_at, 1), -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'QUEUED' THEN
        INSERT INTO queue_counts VALUES
            (NEW.shape, NEW.queue_rank, 60, queue_bucket(NEW.created_at, 60), 1),
            (NEW.shape, NEW.queue_rank, 1, queue_bucket(NEW.created_at, 1), 1);
    END IF;
    RETURN NULL;
END $$;
-- Every column that places a run in the counts: the store never rewrites shape or created_at,
-- but an operator's UPDATE must not leave the counts wrong either.
CREATE TRIGGER runs_count_queue AFTER INSERT OR UPDATE OF state, priority, shape, created_at OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_count_queue();

INSERT INTO queue_counts
SELECT shape, queue_rank, g.span, queue_bucket(created_at, g.span), count(*)
FROM runs CROSS JOIN (VALUES (1), (60)) g(span) WHERE state = 'QUEUED' GROUP BY 1, 2, 3, 4;
ANALYZE queue_counts;

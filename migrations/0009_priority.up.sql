-- Priorities: 0 to 100, higher first; the queue orders by priority, then arrival. queue_rank is
-- the priority turned so that the whole queue order ascends — (queue_rank, created_at, run_id) —
-- and one row comparison or one index scan serves it. Derived, never written.
ALTER TABLE runs ADD COLUMN priority smallint NOT NULL DEFAULT 50,
    ADD CONSTRAINT runs_priority_range CHECK (priority BETWEEN 0 AND 100),
    ADD COLUMN queue_rank smallint GENERATED ALWAYS AS (100 - priority) STORED;

-- The wake: the first run of each shape in queue order (its oldest comes from runs_queue_by_shape).
CREATE INDEX runs_queue_by_shape_rank ON runs (shape, queue_rank, created_at, run_id) WHERE state = 'QUEUED';
-- queue_position and the list's: the runs ahead of one, in queue order.
CREATE INDEX runs_queue_ranked ON runs (queue_rank, created_at, run_id) WHERE state = 'QUEUED';
-- Arrival order alone no longer orders the queue.
DROP INDEX runs_queue;

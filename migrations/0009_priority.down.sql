CREATE INDEX IF NOT EXISTS runs_queue ON runs (created_at, run_id) WHERE state = 'QUEUED';
DROP INDEX IF EXISTS runs_queue_ranked;
DROP INDEX IF EXISTS runs_queue_by_shape_rank;
ALTER TABLE runs DROP COLUMN IF EXISTS queue_rank, DROP CONSTRAINT IF EXISTS runs_priority_range, DROP COLUMN IF EXISTS priority;

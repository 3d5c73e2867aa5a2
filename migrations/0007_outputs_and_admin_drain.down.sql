ALTER TABLE nodes DROP CONSTRAINT IF EXISTS nodes_drain_request_whole,
    DROP COLUMN IF EXISTS drain_requested_at, DROP COLUMN IF EXISTS drain_requested_by;
ALTER TABLE steps DROP COLUMN IF EXISTS outputs;

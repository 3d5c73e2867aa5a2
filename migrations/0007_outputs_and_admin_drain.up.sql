-- A step's outputs: what a succeeded step tells the steps that wait for it (string values,
-- bounded by the API). NULL until it succeeds with some; cleared when the run is requeued.
ALTER TABLE steps ADD COLUMN outputs jsonb;

-- A drain an admin asked for, from outside: the node's own heartbeat cannot lift it (draining
-- is the node's own say). A node is draining when either says so.
ALTER TABLE nodes ADD COLUMN drain_requested_by text, ADD COLUMN drain_requested_at timestamptz,
    ADD CONSTRAINT nodes_drain_request_whole CHECK ((drain_requested_by IS NULL) = (drain_requested_at IS NULL));

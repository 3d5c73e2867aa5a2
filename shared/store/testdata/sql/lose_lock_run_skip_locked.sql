/* lose a lease: lock the run unless held */
SELECT r.run_id, r.kind FROM leases l JOIN runs r ON r.run_id = l.run_id
WHERE l.node_id = $1 AND l.epoch = $2 FOR UPDATE OF r SKIP LOCKED

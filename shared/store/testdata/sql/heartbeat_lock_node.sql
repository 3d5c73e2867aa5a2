/* heartbeat: lock the node */
SELECT 1 FROM nodes WHERE node_id = $1 FOR UPDATE

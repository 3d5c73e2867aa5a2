/* lose a lease: lock the node unless held */
SELECT 1 FROM nodes WHERE node_id = $1 FOR NO KEY UPDATE SKIP LOCKED

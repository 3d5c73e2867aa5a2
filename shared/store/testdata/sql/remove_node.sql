/* remove node */
DELETE FROM nodes WHERE node_id = $1

/* report: lock the node */
SELECT 1 FROM nodes WHERE node_id = $1 AND ($2::bool OR infra_failures > 0 OR health = 'suspect' OR check_run_id = $3::text)
FOR NO KEY UPDATE

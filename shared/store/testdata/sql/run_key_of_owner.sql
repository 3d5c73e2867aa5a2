/* runs: key of owner */
SELECT run_id FROM runs WHERE owner = $1 AND name = $2

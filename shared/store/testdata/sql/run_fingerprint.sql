/* submit: resubmitted */
SELECT run_id, request_hash FROM runs WHERE owner = $1 AND name = $2

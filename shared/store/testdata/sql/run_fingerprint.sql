/* submit: resubmitted */
SELECT owner, request_hash FROM runs WHERE run_id = $1

/* lock a run */
SELECT state, attempt, cancel_requested_at IS NOT NULL, owner, kind, keep_on_failure_seconds IS NOT NULL FROM runs
WHERE run_id = $1 AND ($2::text = '' OR owner = $2::text) AND ($3::text = '' OR state <> 'QUEUED')
FOR UPDATE

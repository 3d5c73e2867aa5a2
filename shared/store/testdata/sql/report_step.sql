/* report: step */
WITH step AS (UPDATE steps SET state = @state::text, tries = @tries::int, exit_code = @exit_code::int,
    message = @message::text, output = @output::text, outputs = @outputs::jsonb, epoch = @epoch::bigint,
    started_at = CASE WHEN @state::text = 'RUNNING' THEN now()
                      WHEN @state::text = 'PENDING' THEN NULL ELSE started_at END,
    finished_at = CASE WHEN @state::text IN ('PENDING', 'RUNNING') THEN NULL ELSE now() END
WHERE run_id = @run_id::text AND step_id = @step_id::text AND state = @prev::text
  AND EXISTS (SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = @run_id::text
              AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = @role::text)
RETURNING step_id
), logged AS (INSERT INTO step_logs (run_id, step_id, attempt, state, bytes, sha256, uploaded)
SELECT @run_id::text, @step_id::text, @attempt::int, @log_state::text, @log_bytes::bigint, @log_sha256::text, @log_uploaded::bool
FROM step WHERE @log_bytes::bigint IS NOT NULL
ON CONFLICT ON CONSTRAINT step_logs_pkey DO UPDATE SET state = excluded.state, bytes = excluded.bytes,
    sha256 = excluded.sha256, uploaded = excluded.uploaded, recorded_at = now())
SELECT (SELECT count(*) FROM step), 0::bigint, '{}'::text[]

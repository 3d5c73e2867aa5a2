/* report: step */
WITH step AS (UPDATE steps SET state = @state::text, tries = @tries::int, exit_code = @exit_code::int,
    message = @message::text, output = @output::text, outputs = @outputs::jsonb, epoch = @epoch::bigint,
    started_at = CASE WHEN @state::text = 'RUNNING' THEN now()
                      WHEN @state::text = 'PENDING' THEN NULL ELSE started_at END,
    finished_at = CASE WHEN @state::text IN ('PENDING', 'RUNNING') THEN NULL ELSE now() END
WHERE run_id = @run_id::text AND step_id = @step_id::text AND state = @prev::text
  AND EXISTS (SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = @run_id::text
              AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = @role::text)
RETURNING step_id)
SELECT (SELECT count(*) FROM step), 0::bigint, '{}'::text[]

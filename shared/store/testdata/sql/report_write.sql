/* report: write */
WITH RECURSIVE step AS (UPDATE steps SET state = @state::text, tries = @tries::int, exit_code = @exit_code::int,
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
    sha256 = excluded.sha256, uploaded = excluded.uploaded, recorded_at = now()
), skipped AS (
    UPDATE steps SET state = 'SKIPPED', finished_at = now()
    WHERE run_id = @run_id::text AND step_id = ANY (@skip::text[]) AND state = 'PENDING'
      AND EXISTS (SELECT 1 FROM step)
), freed AS (
    DELETE FROM leases WHERE run_id = @run_id::text AND (role = ANY (@release::text[]) OR @settle::text <> '')
      AND NOT role = ANY (@keep::text[]) AND EXISTS (SELECT 1 FROM step)
    RETURNING node_id
), shapes(shape) AS (
    (SELECT shape FROM runs WHERE state = 'QUEUED' ORDER BY shape LIMIT 1)
    UNION ALL
    SELECT (SELECT r.shape FROM runs r WHERE r.state = 'QUEUED' AND r.shape > s.shape ORDER BY r.shape LIMIT 1)
    FROM shapes s WHERE s.shape IS NOT NULL
), wanted AS (
    SELECT DISTINCT ARRAY(SELECT jsonb_array_elements_text(need)) AS needs
    FROM shapes s CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN s.shape LIKE 'check:%' THEN '[]'::jsonb ELSE s.shape::jsonb END) need
    WHERE s.shape IS NOT NULL AND EXISTS (SELECT 1 FROM freed)
), held AS (
    INSERT INTO free_nodes (node_id, held_until)
    SELECT n.node_id, now() + @hold::float8 * interval '1 second'
    FROM freed JOIN nodes n ON n.node_id = freed.node_id
    WHERE n.advert_expires_at > now() AND NOT (n.draining OR n.drain_requested_by IS NOT NULL) AND NOT (n.health = 'quarantined') AND EXISTS (
        SELECT 1 FROM wanted w WHERE n.labels @> w.needs AND NOT EXISTS (
            SELECT 1 FROM free_nodes f JOIN nodes o ON o.node_id = f.node_id
            WHERE (f.held_until IS NULL OR f.held_until <= now()) AND o.advert_expires_at > now() AND NOT (o.draining OR o.drain_requested_by IS NOT NULL) AND NOT (o.health = 'quarantined') AND o.check_run_id IS NULL AND o.labels @> w.needs
              AND o.node_id NOT IN (SELECT node_id FROM freed)))
    ON CONFLICT DO NOTHING
    RETURNING node_id
), settled AS (
    UPDATE runs SET state = @settle::text, reason = @reason::text, finished_at = now(), deadline_at = NULL
    WHERE run_id = @run_id::text AND @settle::text <> '' AND state = 'RUNNING' AND EXISTS (SELECT 1 FROM step)
    RETURNING attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT @run_id::text, @attempt::int, 'settled', 'RUNNING', @settle::text, @reason::text, NULL FROM settled
    UNION ALL
    SELECT @run_id::text, @attempt::int, 'released', 'RUNNING', 'RUNNING', NULL, node_id
    FROM freed WHERE @settle::text = ''
)
SELECT (SELECT count(*) FROM step), (SELECT count(*) FROM freed), (SELECT coalesce(array_agg(node_id), '{}') FROM held)

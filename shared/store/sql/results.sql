-- A node's report on one step (results.go decides; these write what it decided).

-- fragment: report_step_update
-- Writes the reported step, re-checking what the report was decided from (I7): the step's
-- state, and the lease the report is fenced by. The run's row lock already keeps both as read;
-- if the update ever finds otherwise, it writes nothing, nor does anything gated on it, and
-- Report answers ErrStaleAssignment.
UPDATE steps SET state = @state::text, tries = @tries::int, exit_code = @exit_code::int,
    message = @message::text, output = @output::text, outputs = @outputs::jsonb, epoch = @epoch::bigint,
    started_at = CASE WHEN @state::text = {{RUNNING}} THEN now()
                      WHEN @state::text = {{PENDING}} THEN NULL ELSE started_at END,
    finished_at = CASE WHEN @state::text IN ({{PENDING}}, {{RUNNING}}) THEN NULL ELSE now() END
WHERE run_id = @run_id::text AND step_id = @step_id::text AND state = @prev::text
  AND EXISTS (SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = @run_id::text
              AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = @role::text)
RETURNING step_id

-- fragment: record_step_log
-- What a terminal report says of the step's log in this attempt (@log_bytes NULL: nothing),
-- written only when the step was (step), so a refused report stores no summary. A later try's
-- report in the same attempt (after a retry) replaces the earlier one's: its log covers every
-- try so far.
INSERT INTO step_logs (run_id, step_id, attempt, state, bytes, sha256, uploaded)
SELECT @run_id::text, @step_id::text, @attempt::int, @log_state::text, @log_bytes::bigint, @log_sha256::text, @log_uploaded::bool
FROM step WHERE @log_bytes::bigint IS NOT NULL
ON CONFLICT ON CONSTRAINT step_logs_pkey DO UPDATE SET state = excluded.state, bytes = excluded.bytes,
    sha256 = excluded.sha256, uploaded = excluded.uploaded, recorded_at = now()

-- name: report_step
-- A report that changes its step only (started, a retry): the usual half of all reports, and a
-- fifth of report_write to start up.
/* report: step */
WITH step AS ({{report_step_update}}
), logged AS ({{record_step_log}})
SELECT (SELECT count(*) FROM step), 0::bigint, '{}'::text[]

-- name: report_write
-- What Report decided, in one statement: the step, the dependents it skips, the leases it
-- releases, the settle. A released node is held for the reporter's wake (migration 0011) when
-- a queued run needs a node of its kind and no other free node of that kind is about: the queue
-- waits for exactly this node, and every wake would reach for it. (With others about, the runs
-- queued are being placed by other wakes, and a hold would only make its wake lose the race for
-- them and let go.) Its free_nodes row is written here, with the hold, so the lease trigger's
-- own insert of it finds the row there and does nothing.
/* report: write */
WITH RECURSIVE step AS ({{report_step_update}}
), logged AS ({{record_step_log}}
), skipped AS (
    UPDATE steps SET state = {{SKIPPED}}, finished_at = now()
    WHERE run_id = @run_id::text AND step_id = ANY (@skip::text[]) AND state = {{PENDING}}
      AND EXISTS (SELECT 1 FROM step)
), freed AS (
    -- @keep: the roles whose nodes pass to the run's debug hold (keep_for_debug, next in the
    -- transaction) instead.
    DELETE FROM leases WHERE run_id = @run_id::text AND (role = ANY (@release::text[]) OR @settle::text <> '')
      AND NOT role = ANY (@keep::text[]) AND EXISTS (SELECT 1 FROM step)
    RETURNING node_id
), {{queued_shapes}}, wanted AS (
    -- Each role's needs of every queued shape (a shape is its roles' needs, as JSON).
    SELECT DISTINCT ARRAY(SELECT jsonb_array_elements_text(need)) AS needs
    FROM shapes s CROSS JOIN LATERAL jsonb_array_elements({{shape_needs s}}) need
    WHERE s.shape IS NOT NULL AND EXISTS (SELECT 1 FROM freed)
), held AS (
    INSERT INTO free_nodes (node_id, held_until)
    SELECT n.node_id, now() + @hold::float8 * interval '1 second'
    FROM freed JOIN nodes n ON n.node_id = freed.node_id
    WHERE {{takes_work n}} AND EXISTS (
        SELECT 1 FROM wanted w WHERE n.labels @> w.needs AND NOT EXISTS (
            SELECT 1 FROM free_nodes f JOIN nodes o ON o.node_id = f.node_id
            WHERE {{unheld f}} AND {{takes_work o}} AND {{unreserved o}} AND o.labels @> w.needs
              AND o.node_id NOT IN (SELECT node_id FROM freed)))
    ON CONFLICT DO NOTHING
    RETURNING node_id
), settled AS (
    UPDATE runs SET state = @settle::text, reason = @reason::text, finished_at = now(), deadline_at = NULL
    WHERE run_id = @run_id::text AND @settle::text <> '' AND state = {{RUNNING}} AND EXISTS (SELECT 1 FROM step)
    RETURNING attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT @run_id::text, @attempt::int, 'settled', {{RUNNING}}, @settle::text, @reason::text, NULL FROM settled
    UNION ALL
    SELECT @run_id::text, @attempt::int, 'released', {{RUNNING}}, {{RUNNING}}, NULL, node_id
    FROM freed WHERE @settle::text = ''
)
SELECT (SELECT count(*) FROM step), (SELECT count(*) FROM freed), (SELECT coalesce(array_agg(node_id), '{}') FROM held)

-- name: report_next
-- The steps the report made runnable for its node (decided in Go: @next), as the node is handed
-- them. A statement of its own after the write, in the same transaction, so that it sees the
-- write: the outputs just reported are the inputs of the steps that waited for them.
/* report: next */
SELECT coalesce(json_agg({{node_step s r}} ORDER BY s.ordinal), '[]')
FROM steps s JOIN runs r ON r.run_id = s.run_id
WHERE s.run_id = $1 AND s.step_id = ANY ($2::text[])

-- name: keep_for_debug
-- A run that keeps its failed boards (keep_on_failure_seconds) settled FAILED step_failed: the
-- leases of its roles @keep pass to a new hold of its owner's (@hold_id), lasting
-- keep_on_failure_seconds, each a new grant (a new epoch) under the node's boot, in the settling
-- transaction (report_write, just before, released every other lease and left these): there is
-- no moment in which another run could take the nodes. The hold's roles are the run's, each
-- pinned to its node; the run and the hold name each other. It answers the hold's id.
/* report: keep for debug */
WITH failed AS (
    SELECT r.run_id, r.owner, r.priority, r.keep_on_failure_seconds AS seconds FROM runs r
    WHERE r.run_id = @run_id::text AND r.state = {{FAILED}} AND r.reason = {{reason_step_failed}}
      AND r.keep_on_failure_seconds IS NOT NULL AND r.debug_hold IS NULL
), kept AS (
    DELETE FROM leases l USING failed f WHERE l.run_id = f.run_id AND l.role = ANY (@keep::text[])
    RETURNING l.node_id, l.role, l.boot_id
), hold AS (
    INSERT INTO runs (run_id, name, owner, state, priority, request_hash, shape, width, max_attempts, kind,
        hold_seconds, hold_ends_at, started_at, debug_of)
    SELECT @hold_id::text, @hold_id::text, f.owner, {{RUNNING}}, f.priority, '\x'::bytea,
        (SELECT '[' || string_agg('["' || {{NODE_ID_LABEL_PREFIX}} || k.node_id || '"]', ',' ORDER BY k.node_id) || ']' FROM kept k),
        (SELECT count(*) FROM kept), 1, {{KIND_HOLD}}, f.seconds, now() + f.seconds * interval '1 second', now(), f.run_id
    FROM failed f WHERE EXISTS (SELECT 1 FROM kept)
    RETURNING run_id, attempt, state, kind
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT h.run_id, k.role, row_number() OVER (ORDER BY k.role), ARRAY[{{NODE_ID_LABEL_PREFIX}} || k.node_id], k.node_id
    FROM hold h CROSS JOIN kept k
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT k.node_id, h.run_id, k.role, k.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM hold h CROSS JOIN kept k
), named AS (
    UPDATE runs r SET debug_hold = h.run_id FROM hold h WHERE r.run_id = @run_id::text
), run AS (SELECT * FROM hold
), event AS (
    -- Placed as it is born: submitted, then its notice (hold_placed).
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, 1, 'submitted', NULL, {{RUNNING}}, NULL FROM hold
    UNION ALL
    {{hold_placed}}
)
SELECT (SELECT run_id FROM hold)

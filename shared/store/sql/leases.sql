-- A run losing one of its nodes: the lease expired, the node restarted, or it was removed.

-- fragment: lock_run_of_lease
-- The run's row before the lease (lock.go: node, run, lease): taking the lease first would
-- deadlock against a report releasing the same node.
SELECT r.run_id, r.kind FROM leases l JOIN runs r ON r.run_id = l.run_id
WHERE l.node_id = $1 AND l.epoch = $2 FOR UPDATE OF r

-- name: lose_lock_node
-- The reaper's, before the run: a loss counts against its node (health.sql), and lock.go's order
-- is node, run, lease. A node another writer holds is left to them, or to the next reap.
/* lose a lease: lock the node unless held */
SELECT 1 FROM nodes WHERE node_id = $1 FOR NO KEY UPDATE SKIP LOCKED

-- name: lose_lock_run
/* lose a lease: lock the run */
{{lock_run_of_lease}}

-- name: lose_lock_run_skip_locked
-- The reaper's: a run another writer holds is left to them, or to the next reap, so that
-- reapers over one backlog share it instead of queueing.
/* lose a lease: lock the run unless held */
{{lock_run_of_lease}} SKIP LOCKED

-- name: lose_lease
-- The lost lease goes (if it is still the one the decision was about: the same grant, still
-- expired for the reaper, still under another boot for a restart), and its run either returns
-- to the queue — same place, next attempt, holding nothing — or ends: FAILED with the reason,
-- or CANCELLED if a cancel was under way. Either way its other leases are released with it.
-- It answers the lost lease (0 or 1), the nodes of the others released (the run-mates, whose
-- agents the caller tells to look now), and whether the loss moved the node's health (an
-- event its caller publishes).
/* lose a lease */
WITH lost AS (
    DELETE FROM leases WHERE node_id = @node_id::text AND epoch = @epoch::bigint
      AND (NOT @only_expired::bool OR expires_at < now())
      AND (@boot_not::text = '' OR boot_id <> @boot_not::text)
    RETURNING run_id, expires_at
), run AS (
    UPDATE runs r SET
        state = CASE WHEN r.cancel_requested_at IS NOT NULL THEN {{CANCELLED}}
                     WHEN r.attempt < r.max_attempts THEN {{QUEUED}} ELSE {{FAILED}} END,
        reason = CASE WHEN r.cancel_requested_at IS NOT NULL THEN {{reason_cancelled}}
                      WHEN r.attempt < r.max_attempts THEN NULL ELSE @reason::text END,
        attempt = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                       THEN r.attempt + 1 ELSE r.attempt END,
        started_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                          THEN NULL ELSE r.started_at END,
        deadline_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN now() + r.queue_timeout_seconds * interval '1 second' END,
        finished_at = CASE WHEN r.cancel_requested_at IS NULL AND r.attempt < r.max_attempts
                           THEN NULL ELSE now() END
    FROM lost WHERE r.run_id = lost.run_id AND r.state = {{RUNNING}}
    RETURNING r.run_id, r.state, r.attempt, r.reason, r.kind
), others AS (
    DELETE FROM leases l USING run WHERE l.run_id = run.run_id AND l.node_id <> @node_id::text
    RETURNING l.node_id
), roles AS (
    UPDATE run_roles ro SET node_id = '' FROM run
    WHERE ro.run_id = run.run_id AND run.state = {{QUEUED}}
), steps AS (
    UPDATE steps st SET
        state = CASE WHEN run.state = {{QUEUED}} THEN {{PENDING}} ELSE {{CANCELLED}} END,
        tries = CASE WHEN run.state = {{QUEUED}} THEN 0 ELSE st.tries END,
        exit_code = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE st.exit_code END,
        message = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE st.message END,
        output = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE st.output END,
        outputs = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE st.outputs END,
        epoch = NULL, -- queued: a new attempt; ended: by no report of a node (see end_runs)
        started_at = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE st.started_at END,
        finished_at = CASE WHEN run.state = {{QUEUED}} THEN NULL ELSE now() END
    FROM run
    WHERE st.run_id = run.run_id AND (run.state = {{QUEUED}} OR st.state IN ({{PENDING}}, {{RUNNING}}))
), ev AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason, node_id)
    SELECT run_id, CASE WHEN state = {{QUEUED}} THEN attempt - 1 ELSE attempt END,
           'node_lost', {{RUNNING}}, state, @reason::text, @node_id::text
    FROM run
    UNION ALL
    -- A hold that lost a node has ended (one attempt): its notice (hold_ended, holds.sql).
    SELECT run_id, attempt, 'hold_ended', {{RUNNING}}, state, reason, @node_id::text
    FROM run WHERE kind = {{KIND_HOLD}} AND state <> {{QUEUED}}
), excused AS (
    -- Not the node's fault: the whole fleet silent (no heartbeat accepted anywhere for a lease's
    -- life: the system, not the node, was down), or a lease the outage grace renewed — its
    -- expiry is the grace's, not a renewal the node missed (health.sql).
    SELECT 1 FROM heartbeat_pulse p, lost
    WHERE p.only_row AND (p.heard_at < now() - @lease_ttl::float8 * interval '1 second'
                          OR lost.expires_at <= p.graced_at + @lease_ttl::float8 * interval '1 second')
), blamed AS (
    -- The lost node only (its run-mates lost nothing of their own), when the loss counts
    -- (@blame: an expiry or a restart), locked before anything else by the caller (lock.go).
    SELECT n.node_id, n.health, n.infra_failures FROM nodes n
    WHERE n.node_id = @node_id::text AND @blame::bool AND EXISTS (SELECT 1 FROM run)
      AND NOT EXISTS (SELECT 1 FROM excused)
    FOR NO KEY UPDATE
), health_changes AS ({{health_counted}}
), history AS ({{health_history}}
)
SELECT (SELECT count(*) FROM lost), (SELECT coalesce(array_agg(node_id), '{}') FROM others),
       EXISTS (SELECT 1 FROM health_changes c WHERE c.from_health <> c.to_health)

-- Holds (migration 0017): a run of kind hold, no steps, its nodes leased until it ends. Placed
-- as any run is (submit_insert, wake_promote: hold_end sets its end); ended here.
--
-- Its notices are events on the bus, for a lab's rule to route to chat or mail: hold_placed,
-- hold_expiring (warn_holds_ending), hold_ended. Each is written by the statement that did what
-- it tells, as one more row of that statement's INSERT into run_events, after the row of the
-- change itself, so a consumer ordering by seq reads the change first; for a run of another
-- kind that second branch yields no row. hold_ended carries the run's reason (none for a
-- SUCCEEDED end): the event before it — hold_released, hold_expired, cancelled, node_lost, ...
-- — says how the hold ended.

-- fragment: hold_placed
-- The notice of a hold placed, as the rest of its statement's INSERT (run_id, attempt, kind,
-- from_state, to_state, reason) of its run CTE (run_id, attempt, state, kind). RUNNING to
-- RUNNING: run_events_running_once_per_attempt counts entries into RUNNING from another state,
-- so the placing event stays the attempt's one.
SELECT run_id, attempt, 'hold_placed', {{RUNNING}}, {{RUNNING}}, NULL FROM run
    WHERE state = {{RUNNING}} AND kind = {{KIND_HOLD}}

-- name: end_released
-- The owner releases a placed hold: SUCCEEDED, its nodes free, its event hold_released. The
-- caller holds the run (lock_run) and wakes the queue after its commit.
/* holds: release */
WITH due AS (SELECT run_id FROM runs WHERE run_id = @run_id::text AND kind = {{KIND_HOLD}} FOR UPDATE), {{end_runs}}

-- name: end_holds_due
-- The reaper's: placed holds whose time is up end SUCCEEDED, event hold_expired — decided in
-- the statement that ends them (I7), so an extend committed first wins.
/* reap: holds due */
WITH due AS (
    SELECT run_id FROM runs WHERE state = {{RUNNING}} AND kind = {{KIND_HOLD}} AND hold_ends_at <= now()
    ORDER BY hold_ends_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), {{end_runs}}

-- name: extend_hold
-- Moves a live hold's end later by @seconds, never past @max_hold seconds from now and never
-- earlier than it was: a placed hold's hold_ends_at, a queued one's length. The conditional
-- write is the bound, however many extends race (the run locked by the caller, lock_run). Its
-- event says by how much the end moved.
/* holds: extend */
WITH moved AS (
    UPDATE runs SET
        hold_ends_at = CASE WHEN state = {{RUNNING}}
            THEN greatest(hold_ends_at, least(hold_ends_at + @seconds::int * interval '1 second',
                                              now() + @max_hold::int * interval '1 second'))
            ELSE hold_ends_at END,
        hold_seconds = CASE WHEN state = {{QUEUED}} THEN greatest(hold_seconds, least(hold_seconds + @seconds::int, @max_hold::int))
            ELSE hold_seconds END
    WHERE run_id = @run_id::text AND kind = {{KIND_HOLD}} AND state IN ({{QUEUED}}, {{RUNNING}})
    RETURNING run_id, attempt, state
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'hold_extended', state, state FROM moved
)
SELECT count(*) FROM moved

-- name: regrant_hold
-- A held node restarted: a person rebooting the board is the commonest debugging act, and the
-- hold goes on. The lease held under the old boot ($2, its epoch) is granted again under the new
-- boot ($3) with a new epoch, in the restart's transaction (the node and the run locked first:
-- lock.go); the deferred leases_held_under_current_boot sees the new boot at COMMIT. It answers
-- nothing when the lease is not a placed hold's.
/* holds: regrant after a restart */
WITH old AS (
    DELETE FROM leases l USING runs r
    WHERE l.node_id = $1 AND l.epoch = $2 AND r.run_id = l.run_id AND r.kind = {{KIND_HOLD}} AND r.state = {{RUNNING}}
    RETURNING l.node_id, l.run_id, l.role
)
INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
SELECT o.node_id, o.run_id, o.role, $3, now() + $4::float8 * interval '1 second' FROM old o
RETURNING run_id

-- name: warn_holds_ending
-- The reaper's: placed holds whose end is within @lead seconds, not yet warned of that end,
-- get their notice (hold_expiring) and remember the end they were warned of — decided in the
-- statement that marks them, so two reapers warn once. An extend moves the end off the one
-- warned of, and the new end is warned of when it nears in its turn. A hold past its end is
-- left to end_holds_due.
/* reap: holds ending */
WITH due AS (
    SELECT run_id FROM runs
    WHERE state = {{RUNNING}} AND kind = {{KIND_HOLD}}
      AND hold_ends_at > now() AND hold_ends_at <= now() + @lead::float8 * interval '1 second'
      AND hold_warned_for IS DISTINCT FROM hold_ends_at
    ORDER BY hold_ends_at LIMIT @batch::int FOR UPDATE SKIP LOCKED
), warned AS (
    UPDATE runs r SET hold_warned_for = r.hold_ends_at FROM due
    WHERE r.run_id = due.run_id AND r.state = {{RUNNING}}
    RETURNING r.run_id, r.attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'hold_expiring', {{RUNNING}}, {{RUNNING}} FROM warned
)
SELECT count(*) FROM warned

-- The run lock: every writer of a run takes the run's row lock first, so a report, a cancel
-- and a reaper never interleave on one run (lock.go holds the protocol and the lock order).

-- name: lock_run
-- It locks only a run the writer may act on. The wake takes a locked queued run for one being
-- promoted and places the run behind it, so a lock taken for nothing would break arrival order:
-- a stranger's cancel (404 after the lock) or a node's late report on a requeued run (409: a
-- queued run holds no lease to report under) would let a younger run overtake the older.
-- $2: the owner a non-admin cancel must be; $3: a report's node, which never locks a queued run.
/* lock a run */
SELECT state, attempt, cancel_requested_at IS NOT NULL, owner, kind, keep_on_failure_seconds IS NOT NULL FROM runs
WHERE run_id = $1 AND ($2::text = '' OR owner = $2::text) AND ($3::text = '' OR state <> {{QUEUED}})
FOR UPDATE

-- name: read_locked_run
-- The run's steps and node $2's lease on it. A statement of its own, after the lock, on
-- purpose: a SELECT ... FOR UPDATE that waited for the lock re-reads the locked row but not the
-- rest of its statement, so steps read with the lock are as they stood before the writer it
-- waited for (a cancel queued behind the report that finishes the last running step would
-- decide from those and leave the run RUNNING with every step final and no lease).
/* read a locked run */
SELECT (SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state,
                'after', s.after, 'tries', s.tries, 'retries', s.retries, 'exit_code', s.exit_code,
                'epoch', s.epoch, 'node_id', ro.node_id) ORDER BY s.ordinal)
          FROM steps s JOIN run_roles ro ON ro.run_id = s.run_id AND ro.role = s.role
          WHERE s.run_id = $1),
       l.epoch, l.boot_id, l.role, EXISTS (SELECT 1 FROM runs WHERE run_id = $1)
FROM (SELECT 1) one LEFT JOIN leases l ON l.run_id = $1 AND l.node_id = $2

-- Events out: the outboxes of runs (migration 0008) and nodes (0015) read, claimed and cleared.
-- publish.go says how.

-- fragment: outbound(c)
-- The claimed events c (event_id) as they are published: the event, its place in its run's
-- history (seq: consumers sort by it, as EventBridge keeps no order), the run's key, its name,
-- owner and kind (a rule matches holds by it), and where its roles are now.
SELECT e.event_id,
       (SELECT count(*) FROM run_events x WHERE x.run_id = e.run_id AND x.event_id <= e.event_id),
       e.run_id, r.name, r.owner, r.kind, e.kind, e.from_state, e.to_state, e.reason, e.attempt, e.at, e.node_id,
       (SELECT coalesce(json_object_agg(ro.role, ro.node_id ORDER BY ro.ordinal), '{}')
          FROM run_roles ro WHERE ro.run_id = e.run_id AND ro.node_id <> '')
FROM c JOIN run_events e ON e.event_id = c.event_id JOIN runs r ON r.run_id = e.run_id
ORDER BY e.event_id

-- name: claim_events_of_runs
-- A handler's own events: the unpublished events of the runs it changed, claimed for
-- @claim_for seconds so that the reaper does not send them meanwhile.
/* events: claim of runs */
WITH due AS (
    SELECT u.event_id FROM run_events e JOIN run_events_unpublished u ON u.event_id = e.event_id
    WHERE e.run_id = ANY (@runs::text[]) AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.event_id LIMIT @limit::int
    FOR UPDATE OF u SKIP LOCKED
), c AS (
    UPDATE run_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
{{outbound c}}

-- name: claim_stale_events
-- The reaper's: events unpublished for @older_than seconds (a handler died after its COMMIT,
-- or EventBridge refused them), oldest first.
/* events: claim stale */
WITH due AS (
    SELECT u.event_id FROM run_events_unpublished u
    WHERE u.recorded_at < now() - @older_than::float8 * interval '1 second'
      AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.recorded_at LIMIT @limit::int
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE run_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
{{outbound c}}

-- name: mark_published
/* events: published */
DELETE FROM run_events_unpublished WHERE event_id = ANY ($1::bigint[])

-- fragment: outbound_node(c)
-- The claimed node events c (event_id) as they are published: each a change of health of
-- node_history.
SELECT h.event_id, h.node_id, h.from_state, h.to_state, h.reason, h.by, h.at
FROM c JOIN node_history h ON h.event_id = c.event_id
ORDER BY h.event_id

-- name: claim_events_of_nodes
-- A handler's own node events: the unpublished health changes of the nodes it moved, claimed
-- for @claim_for seconds so that the reaper does not send them meanwhile. No index of its own:
-- the outbox holds only what is still to send, a few rows each finding its line by
-- node_history's key, where the node's own index would walk its every lease line too.
/* events: claim of nodes */
WITH due AS (
    SELECT u.event_id FROM node_events_unpublished u JOIN node_history h ON h.event_id = u.event_id
    WHERE h.node_id = ANY (@nodes::text[]) AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.event_id LIMIT @limit::int
    FOR UPDATE OF u SKIP LOCKED
), c AS (
    UPDATE node_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
{{outbound_node c}}

-- name: claim_node_events
-- The reaper's: node events (node_history's health changes, migration 0015) unpublished for
-- @older_than seconds (a handler died after its COMMIT, or EventBridge refused them), oldest
-- first, claimed for @claim_for seconds.
/* events: claim node events */
WITH due AS (
    SELECT u.event_id FROM node_events_unpublished u
    WHERE u.recorded_at < now() - @older_than::float8 * interval '1 second'
      AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.recorded_at LIMIT @limit::int
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE node_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
{{outbound_node c}}

-- name: mark_node_events_published
/* events: node events published */
DELETE FROM node_events_unpublished WHERE event_id = ANY ($1::bigint[])

-- name: set_publishing
/* events: publishing */
UPDATE event_publishing SET enabled = $1 WHERE only_row AND enabled <> $1

-- name: prune_switch
-- Lets this transaction delete run events (run_events_append_only), and nothing else.
/* reap: prune switch */
SELECT set_config('mediator.pruning', 'on', true)

-- fragment: prunable(r)
-- r ended more than @days ago, and may go: never a live run; never a run with an event still to
-- publish while publishing is on (with publishing off nothing ever publishes them, so the mark
-- holds nothing back).
r.finished_at < now() - @days::int * interval '1 day'
AND r.state IN ({{FINAL_RUN_STATES}})
AND NOT (EXISTS (SELECT 1 FROM event_publishing WHERE only_row AND enabled)
         AND EXISTS (SELECT 1 FROM run_events e JOIN run_events_unpublished u ON u.event_id = e.event_id
                     WHERE e.run_id = r.run_id))

-- name: prune_due
-- The runs the next prune would take, oldest first, for what the reaper removes outside the
-- database before their rows go (their step logs): each one's owner and key, and whether it
-- ever ran — a run never placed, in any attempt, was handed to no node and has no log. Nothing
-- is locked: prune_runs decides again.
/* reap: prune due */
SELECT r.owner, r.run_id, r.attempt > 1 OR r.started_at IS NOT NULL
FROM runs r WHERE {{prunable r}}
ORDER BY r.finished_at LIMIT @batch::int

-- name: prune_runs
-- Runs that ended more than @days ago go, whole: their steps (and with them their log
-- summaries, step_logs_step_fkey), roles and history; of @keys only, when given (the runs whose
-- logs the reaper removed first), else any. Every condition is decided again here, on the rows
-- locked.
/* reap: prune */
WITH due AS (
    SELECT r.run_id FROM runs r
    WHERE {{prunable r}} AND (@keys::text[] IS NULL OR r.run_id = ANY (@keys::text[]))
    ORDER BY r.finished_at LIMIT @batch::int
    FOR UPDATE SKIP LOCKED
), steps AS (
    DELETE FROM steps s USING due WHERE s.run_id = due.run_id
), roles AS (
    DELETE FROM run_roles ro USING due WHERE ro.run_id = due.run_id
), events AS (
    DELETE FROM run_events e USING due WHERE e.run_id = due.run_id
), gone AS (
    DELETE FROM runs r USING due WHERE r.run_id = due.run_id
    RETURNING r.run_id
)
SELECT count(*) FROM gone

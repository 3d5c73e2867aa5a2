-- Runs: the submission's insert, and reading runs back.

-- fragment: queue_position(r)
-- How many runs are ahead of r while it is QUEUED, in queue order, from queue_counts (migration
-- 0010): the queued runs of the minutes ahead of r's, of the seconds of r's minute ahead of
-- r's, and — counted one by one — of r's own second. Exact under any concurrency, since the
-- counts move in the transactions that move the runs; r itself is never counted.
CASE WHEN r.state = {{QUEUED}} THEN
    (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 60
        AND (c.queue_rank, c.bucket) < (r.queue_rank, queue_bucket(r.created_at, 60)))
  + (SELECT coalesce(sum(c.delta), 0) FROM queue_counts c WHERE c.span = 1 AND c.queue_rank = r.queue_rank
        AND c.bucket >= queue_bucket(r.created_at, 60) * 60 AND c.bucket < queue_bucket(r.created_at, 1))
  + (SELECT count(*) FROM runs q WHERE q.state = {{QUEUED}} AND q.queue_rank = r.queue_rank
        AND q.created_at >= to_timestamp(queue_bucket(r.created_at, 1)) AND {{ahead q r}})
END

-- fragment: run_fields(r)
-- A whole run as clients see it, roles and steps included (scanRun reads them), but for its
-- queue position: its name (the run_id its owner chose), its key, its owner first.
r.name, r.run_id, r.owner, r.state, r.reason, r.priority, r.attempt, r.max_attempts, r.created_at, r.started_at,
r.finished_at, r.cancel_requested_at, r.cancel_reason, r.timeout_seconds, r.queue_timeout_seconds,
r.wait_for_capacity, r.metadata, r.kind, r.hold_seconds, r.hold_ends_at, r.keep_on_failure_seconds,
(SELECT d.name FROM runs d WHERE d.run_id = r.debug_hold) AS debug_hold_name,
(SELECT d.name FROM runs d WHERE d.run_id = r.debug_of) AS debug_of_name,
(SELECT json_agg(json_build_object('name', ro.role, 'needs', ro.needs, 'node_id', ro.node_id) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id) AS roles,
(SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state, 'after', s.after,
        'retries', s.retries, 'tries', s.tries, 'exit_code', s.exit_code, 'message', s.message,
        'started_at', s.started_at, 'finished_at', s.finished_at, 'outputs', s.outputs) ORDER BY s.ordinal)
   FROM steps s WHERE s.run_id = r.run_id) AS steps

-- fragment: newest_first(r)
-- The order runs are listed in (GET /v1/runs): newest first, then by name, then by key, which
-- only tells apart runs of different owners created in one microsecond.
r.created_at DESC, r.name DESC, r.run_id DESC

-- The conditions a page of GET /v1/runs may have on its runs r, one per parameter given
-- (listFilter, runs.go, writes them into list_runs' filter).

-- fragment: listed_owner(r)
-- r is the client's own (@owner); an admin's page names no owner.
r.owner = @owner

-- fragment: listed_state(r)
r.state = @state

-- fragment: listed_kind(r)
r.kind = @kind

-- fragment: listed_priority(r)
r.priority = @priority::smallint

-- fragment: listed_after(r)
-- r comes after the cursor (@after_us, @after_name, @after_key: the last run of the page before)
-- in that order. A client's cursor has no key (''): its own runs' names are unique, and with ''
-- the run the cursor names is not after itself.
(r.created_at, r.name, r.run_id) < (timestamptz 'epoch' + @after_us::bigint * interval '1 microsecond', @after_name::text, @after_key::text)

-- name: list_runs(filter)
-- A page of runs, newest first, with the queue positions of its QUEUED runs found once for
-- the page: the queue_position of its first queued run in queue order (lo), plus each one's
-- rank from there among every queued run up to its last (hi). (Found per run, a page would pay
-- for a position per queued run.) A page with no queued run has no lo and
-- no hi, and ranks nothing. hi is the first by the reverse order rather than the one at OFFSET
-- count - 1: that offset is -1 on such a page, an error whenever the plan reads hi before it
-- finds lo empty, which a change of statistics alone decides.
-- {{filter}} is the page's conditions on r, ANDed (listFilter, runs.go), "true" for none:
-- which index serves a page depends on which it has, so each set is a statement of its own.
/* runs: list */
WITH page AS MATERIALIZED (
    SELECT {{run_fields r}} FROM runs r WHERE {{filter}}
    ORDER BY {{newest_first r}} LIMIT @limit
), queued AS (
    SELECT q.* FROM runs q WHERE q.run_id IN (SELECT run_id FROM page WHERE state = {{QUEUED}})
), lo AS (
    SELECT q.state, q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY {{queue_order q}} LIMIT 1
), hi AS (
    SELECT q.queue_rank, q.created_at, q.run_id FROM queued q ORDER BY {{queue_order_reversed q}} LIMIT 1
), ahead AS (
    SELECT {{queue_position lo}} AS n FROM lo
), ranked AS (
    SELECT q.run_id, row_number() OVER (ORDER BY {{queue_order q}}) - 1 AS rank
    FROM runs q, lo, hi
    WHERE q.state = {{QUEUED}} AND NOT {{ahead q lo}} AND NOT {{ahead hi q}}
)
SELECT p.*, CASE WHEN p.state = {{QUEUED}} THEN (SELECT n FROM ahead) + k.rank END
FROM page p LEFT JOIN ranked k ON k.run_id = p.run_id
ORDER BY {{newest_first p}}

-- name: get_run
-- A run by its key.
/* runs: get */
SELECT {{run_fields r}}, {{queue_position r}} FROM runs r WHERE r.run_id = $1

-- name: get_run_of_owner
-- A run by its owner ($1) and the name its owner chose ($2).
/* runs: get of owner */
SELECT {{run_fields r}}, {{queue_position r}} FROM runs r WHERE r.owner = $1 AND r.name = $2

-- name: run_key_of_owner
-- The key of the run its owner ($1) named $2.
/* runs: key of owner */
SELECT run_id FROM runs WHERE owner = $1 AND name = $2

-- name: resolve_run
-- The runs an admin's id may mean: those of that name (of @owner only, when given), or, when no
-- run has the name and no owner is given, the run with that key. At most a few: past one, the
-- admin must say whose.
/* runs: resolve */
SELECT run_id, owner FROM runs WHERE name = @name::text AND (@owner::text = '' OR owner = @owner::text)
UNION ALL
SELECT run_id, owner FROM runs WHERE run_id = @name::text AND @owner::text = ''
    AND NOT EXISTS (SELECT 1 FROM runs WHERE name = @name::text)
LIMIT 10

-- name: run_history
/* runs: history */
SELECT at, attempt, kind, from_state, to_state, reason, node_id
FROM run_events WHERE run_id = $1 ORDER BY event_id

-- name: run_fingerprint
-- What the owner ($1) asked for under a name ($2): a resubmission is the same run only when it
-- asks the same.
/* submit: resubmitted */
SELECT run_id, request_hash FROM runs WHERE owner = $1 AND name = $2

-- name: submit_insert
-- A submission in one statement — so one transaction — with its state already decided. The
-- assignment is re-checked inside it, on the chosen nodes' free_nodes rows (see wake_promote):
-- if one was leased after the match, or another submit or promotion is taking it right now
-- (SKIP LOCKED: a collision costs nothing, it does not wait), the run is stored QUEUED instead
-- (avail comes up short). A one-role run names spare nodes after its choice (the role again in
-- @assign_roles), and takes the first still free, so that concurrent submits reaching for one
-- board do not queue all but one of them; should a lease still slip in, leases_pkey refuses
-- the whole statement and Submit stores the run QUEUED. Either way no 409 leaves the submit
-- path for lack of room.
-- A run decided RUNNING over a queue it saw empty is stored QUEUED should a run that arrived
-- before it be queued by now (runs_queue finds the oldest); one placed on the room a queue it
-- saw leaves (@behind_queue) is not re-decided here.
-- ON CONFLICT DO NOTHING makes concurrent submits of one run_id store one row. It names no
-- conflict target on purpose: runs_run_id_state_key (the target of I2's foreign key) is a
-- second unique index on run_id, and with ON CONFLICT (run_id) a concurrent twin would still
-- raise its violation.
/* submit: insert */
WITH key AS (
    -- The run's key: its name, unless a run has that key already (another owner's run of the
    -- same name, or an older one of its own name: then the unique name wins below), then
    -- @taken_key, the name with a suffix of its own.
    SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = @run_id::text) THEN @taken_key::text
                ELSE @run_id::text END AS key
), {{keyed_nodes}}, avail AS (
    SELECT a.role, n.node_id, n.boot_id
    FROM unnest(@assign_roles::text[], @nodes::text[]) WITH ORDINALITY AS a(role, node_id, ord)
    {{free_nodes_among a}}
    ORDER BY a.ord LIMIT @width::int
    {{hold_free_nodes}}
), decided AS (
    SELECT CASE WHEN @state::text = {{RUNNING}} AND ((SELECT count(*) FROM avail) <> @width::int
                     OR (NOT @behind_queue::bool AND EXISTS (
                         SELECT 1 FROM runs q WHERE q.state = {{QUEUED}} AND ({{arrival q}}) < (now(), (SELECT key FROM key))))) THEN {{QUEUED}}
                ELSE @state::text END AS state
), run AS (
    INSERT INTO runs (run_id, name, owner, state, reason, priority, request_hash, shape, width, max_attempts,
        timeout_seconds, queue_timeout_seconds, wait_for_capacity, metadata, kind, hold_seconds, hold_ends_at, keep_on_failure_seconds,
        started_at, finished_at, deadline_at)
    SELECT (SELECT key FROM key), @run_id::text, @owner::text, d.state, CASE WHEN d.state = {{FAILED}} THEN @reason::text END,
        @priority::smallint, @request_hash::bytea,
        @shape::text, @width::int, @max_attempts::int, @timeout::int, @queue_timeout::int, @wait_for_capacity::bool, @metadata::jsonb,
        @kind::text, @hold_seconds::int, CASE WHEN d.state = {{RUNNING}} THEN {{hold_end @new}} END, @keep_on_failure::int,
        CASE WHEN d.state = {{RUNNING}} THEN now() END,
        CASE WHEN d.state = {{FAILED}} THEN now() END,
        CASE d.state WHEN {{QUEUED}} THEN now() + @queue_timeout::int * interval '1 second'
                     WHEN {{RUNNING}} THEN now() + @timeout::int * interval '1 second' END
    FROM decided d
    ON CONFLICT DO NOTHING
    RETURNING run_id, attempt, state, kind, created_at, queue_rank, hold_ends_at
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT run.run_id, r.role, r.ordinal, string_to_array(r.needs, ','),
           CASE WHEN run.state = {{RUNNING}} THEN a.node_id ELSE '' END
    FROM run CROSS JOIN unnest(@role_names::text[], @role_needs::text[]) WITH ORDINALITY AS r(role, needs, ordinal)
    LEFT JOIN avail a ON a.role = r.role
), steps AS (
    INSERT INTO steps (run_id, step_id, role, ordinal, after, spec, retries, state, finished_at)
    SELECT run.run_id, s.id, s.role, s.ordinal, s.after, s.spec, s.retries,
           CASE WHEN run.state = {{FAILED}} THEN {{SKIPPED}} ELSE {{PENDING}} END,
           CASE WHEN run.state = {{FAILED}} THEN now() END
    FROM run CROSS JOIN jsonb_to_recordset(@steps::jsonb)
        AS s(id text, role text, after text[], spec jsonb, retries int, ordinal int)
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN avail a WHERE run.state = {{RUNNING}}
), event AS (
    -- A hold placed here has its notice too (hold_placed, after submitted: one INSERT, so in
    -- that order); for any other run the second branch yields nothing.
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, 1, 'submitted', NULL, state, CASE WHEN state = {{FAILED}} THEN @reason::text END FROM run
    UNION ALL
    {{hold_placed}}
)
SELECT r.state, r.created_at, {{queue_position r}},
       (SELECT array_agg(role) FROM avail), (SELECT array_agg(node_id) FROM avail), r.run_id, r.hold_ends_at
FROM run r

-- name: set_priority
-- An admin's new priority for a queued run (the run locked first, lock.go), and its event.
/* runs: priority */
WITH run AS (
    UPDATE runs SET priority = @priority::smallint
    WHERE run_id = @run_id::text AND state = {{QUEUED}} AND priority <> @priority::smallint
    RETURNING run_id, attempt
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'priority_changed', {{QUEUED}}, {{QUEUED}} FROM run
)
SELECT count(*) FROM run

-- WakeQueued: promote queued runs onto available nodes (wake.go says how the walk goes).

-- fragment: head_columns(r)
-- A queued run as the wake needs it: its place in the queue, whether it is protected, and its
-- roles' needs.
r.run_id, r.shape, r.created_at, r.queue_rank, {{protected r}},
(SELECT json_agg(json_build_object('Name', ro.role, 'Needs', ro.needs) ORDER BY ro.ordinal)
   FROM run_roles ro WHERE ro.run_id = r.run_id)

-- fragment: head_of_shape(s)
-- The run a shape offers the wake (its head): its oldest, if that one is protected, else its
-- first in queue order. Runs of one shape are interchangeable for placement, so when the head
-- cannot be placed, no run of the shape can. Two index lookups, whatever the depth.
coalesce(
    (SELECT o.run_id FROM runs o WHERE o.state = {{QUEUED}} AND o.shape = s.shape AND {{protected o}}
     ORDER BY o.shape, {{arrival o}} LIMIT 1),
    (SELECT p.run_id FROM runs p WHERE p.state = {{QUEUED}} AND p.shape = s.shape
     ORDER BY p.shape, {{queue_order p}} LIMIT 1))

-- name: wake_start
-- All a sweep reads before it places anything, in one round trip: the head (the first run in
-- queue order) of every shape, with the runs of its shape behind it (behind_head), and up
-- to {{startNodes}} available nodes that could serve one of them. It answers nothing unless both
-- exist, so a wake that can place nothing costs this one statement, whatever the depth of the
-- queue or the size of the fleet.
--
-- The shapes come from queued_shapes, each head from two index lookups (head_of_shape): the
-- cost grows with the number of shapes, not the depth of the queue. Every
-- "first of a shape" orders by shape first, which the equality makes no different, so that the
-- plan walks the shape's index; each head and its needs are looked up per shape, OFFSET 0
-- keeping each a lookup: as a join, a plan made at one depth read all of run_roles at another,
-- and hashed every queued run to find the heads (TestWakeStartLooksHeadsUp). A node no head
-- could use is of no use to any queued run.
/* wake: start */
{{heads_and_free}}

-- name: report_wake_start
-- wake_start inside a report's transaction, for the reporter's wake to start from, when the
-- report holds the node it freed (@node; @held names it again for wake_may_use). The read sees
-- every run committed before it, and a run queued after it passes the held node by, so the wake
-- places on that node without a read of its own after the commit (WakeParams.Read); what it
-- cannot place there it lets go and reads afresh. Without the hold it answers nothing: then the
-- wake reads after the commit, as every other does.
/* report: wake start */
SELECT * FROM ({{heads_and_free}}) w
WHERE EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = @node::text AND f.held_until > now())

-- fragment: heads_and_free
-- wake_start's read (see there).
WITH RECURSIVE {{queued_shapes}}, {{queue_heads}}, needs AS (
    SELECT DISTINCT ro.needs FROM heads h
    CROSS JOIN LATERAL (SELECT needs FROM run_roles ro WHERE ro.run_id = h.run_id OFFSET 0) ro
), free AS (
    SELECT n.node_id, n.labels, {{suspect n}} AS suspect, n.check_run_id FROM free_nodes f JOIN nodes n ON n.node_id = f.node_id
    WHERE EXISTS (SELECT 1 FROM heads) AND {{takes_work n}} AND {{wake_may_use f}}
      AND EXISTS (SELECT 1 FROM needs WHERE n.labels @> needs.needs)
    LIMIT {{startNodes}}
)
SELECT true, h.run_id, h.shape, h.created_at, h.queue_rank, h.protected, h.roles, NULL::text[],
       {{behind_head h}}, NULL::bool, NULL::text
FROM heads h WHERE EXISTS (SELECT 1 FROM free)
UNION ALL
SELECT false, f.node_id, NULL, NULL, NULL, NULL, NULL, f.labels, NULL, f.suspect, f.check_run_id FROM free f

-- fragment: queue_heads
-- The head of every queued shape (head_of_shape), as the CTE heads; the statement names
-- queued_shapes before it.
heads AS (
    SELECT h.* FROM shapes s CROSS JOIN LATERAL (
        SELECT {{head_columns r}} FROM runs r WHERE r.run_id = {{head_of_shape s}} OFFSET 0
    ) h(run_id, shape, created_at, queue_rank, protected, roles)
    WHERE s.shape IS NOT NULL
)

-- fragment: behind_head(h)
-- The queued runs of head h's shape behind it, in the order the wake takes them (protected ones
-- in arrival order, then the rest in queue order, as head_of_shape picks), as JSON: as many as
-- the free nodes read could take and one more, so that a reader knows when it has them all. A
-- submit walks them to see what room the queue leaves it (plan.Admit); a wake takes its next
-- run of the shape from them without a read of its own (wake_next_of_shape), while they last.
-- Two capped index scans per head, only when nodes are free.
(WITH p AS (
     SELECT o.run_id, o.created_at, o.queue_rank FROM runs o
     WHERE o.state = {{QUEUED}} AND o.shape = h.shape AND {{protected o}} AND o.run_id <> h.run_id
     ORDER BY o.shape, {{arrival o}} LIMIT (SELECT count(*) + 1 FROM free)
 ), q AS (
     -- Only as many as the protected runs leave room for: with none left, no scan of a shape
     -- whose every run is protected.
     SELECT o.run_id, o.created_at, o.queue_rank FROM runs o
     WHERE o.state = {{QUEUED}} AND o.shape = h.shape AND NOT {{protected o}} AND o.run_id <> h.run_id
     ORDER BY o.shape, {{queue_order o}} LIMIT (SELECT count(*) + 1 FROM free) - (SELECT count(*) FROM p)
 )
 SELECT coalesce(json_agg(json_build_object('RunID', b.run_id, 'CreatedAt', b.created_at,
            'QueueRank', b.queue_rank, 'Protected', b.part = 0) ORDER BY b.part, b.o), '[]')
 FROM (SELECT p.*, 0 AS part, row_number() OVER (ORDER BY {{arrival p}}) AS o FROM p
       UNION ALL
       SELECT q.*, 1, row_number() OVER (ORDER BY {{queue_order q}}) FROM q) b)

-- name: wake_next_of_shape
-- The head of a shape (@head_shape) once its last head was promoted.
/* wake: next of shape */
SELECT {{head_columns r}} FROM runs r WHERE r.run_id = {{head_of_shape @head}}

-- name: wake_free_by_need
-- Up to @k available nodes per need (a need_key). With k at least the heads' widths added up,
-- every head finds its nodes whatever the heads before it took: a role with k candidates keeps
-- one free (Hall's condition). The nodes are found by their labels (nodes_labels) and then
-- checked free, each need's labels split once (OFFSET 0), not once per node.
/* wake: free nodes by need */
SELECT DISTINCT c.node_id, c.labels, c.suspect, coalesce(c.check_run_id, '')
FROM unnest(@needs::text[]) AS nd(need)
CROSS JOIN LATERAL (SELECT string_to_array(nd.need, ',') AS labels OFFSET 0) want
CROSS JOIN LATERAL (
    SELECT n.node_id, n.labels, {{suspect n}} AS suspect, n.check_run_id FROM nodes n
    WHERE n.labels @> want.labels AND {{takes_work n}}
      AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id AND {{wake_may_use f}})
    LIMIT @k) c

-- fragment: keyed_nodes
-- The chosen nodes (@nodes) that are live and taking work, each with the key-share lock on its
-- row that a lease's foreign key will want, skipping a node whose row a restart or a removal
-- holds (a routine heartbeat changes no key, and does not conflict). A statement that takes
-- nodes names this CTE first and takes their free_nodes rows only through it (take_free_nodes),
-- so these locks come first: a writer holds a node's free_nodes row only when it holds the node
-- too, and so will lease it — which is what a writer that finds the row held takes it to mean
-- (it goes on without the node). Were the row taken first, a promotion that got it and then
-- skipped the node's row would hold the row to its end, and a wake coming meanwhile, after the
-- restart's commit, would find it held and skip the node as well: no one would place on it.
-- Were the key-share lock left to the lease insert, it would wait for the restart's transaction
-- while the promotion held the run it picked, and every other wake would skip that run.
keyed AS (
    SELECT n.node_id, n.boot_id FROM nodes n
    WHERE n.node_id = ANY (@nodes::text[]) AND {{takes_work n}} AND {{serves_placed n}}
    FOR KEY SHARE OF n SKIP LOCKED
)

-- fragment: take_free_nodes(a)
-- Follows a list a of chosen nodes (column node_id) and holds those still free, live and not
-- being restarted (keyed_nodes, which the statement names first), by their free_nodes rows,
-- skipping any another writer is taking: wake_promote says why those rows. A submit's placement
-- and a promotion both take nodes through it (a submit puts an ORDER BY and a LIMIT between its
-- two halves).
{{free_nodes_among a}}
{{hold_free_nodes}}

-- fragment: free_nodes_among(a)
-- The first half of take_free_nodes: the chosen nodes still free, of those keyed. The keyed
-- list is read as an array before any free_nodes row is scanned, so its locks are taken first.
JOIN keyed n ON n.node_id = a.node_id
JOIN free_nodes f ON f.node_id = a.node_id
WHERE f.node_id = ANY (ARRAY(SELECT node_id FROM keyed))

-- fragment: hold_free_nodes
-- The second half of take_free_nodes: the free_nodes rows' locks.
FOR UPDATE OF f SKIP LOCKED

-- fragment: promote_slots
-- The planned nodes, held by their free_nodes rows first (see wake_promote).
{{keyed_nodes}}, slot AS (
    SELECT a.ord, a.need, n.node_id, n.boot_id
    FROM unnest(@needs::text[], @nodes::text[]) WITH ORDINALITY AS a(need, node_id, ord)
    {{take_free_nodes a}}
)

-- fragment: promote_pick
-- Promotes the run of pick onto the slots: the conditional update (I6), the leases (I1), the
-- roles' node ids, the event (and a hold's hold_placed); then says which nodes it held, which
-- run it placed, and where — its start and each role's node, so that a caller answers with the
-- run as promoted without reading it again.
role AS (
    SELECT ro.role, {{need_key ro}} AS need,
           row_number() OVER (ORDER BY {{need_key ro}} COLLATE "C", ro.role COLLATE "C") AS ord
    FROM run_roles ro WHERE ro.run_id = (SELECT run_id FROM pick)
), assign AS (
    SELECT r.role, s.node_id, s.boot_id FROM role r JOIN slot s ON s.ord = r.ord AND s.need = r.need
), run AS (
    UPDATE runs r SET state = {{RUNNING}}, started_at = now(),
        deadline_at = now() + r.timeout_seconds * interval '1 second', hold_ends_at = {{hold_end r}}
    FROM pick WHERE r.run_id = pick.run_id AND r.state = {{QUEUED}} AND pick.width = (SELECT count(*) FROM assign)
    RETURNING r.run_id, r.attempt, r.created_at, r.queue_rank, r.started_at, r.state, r.kind
), roles AS (
    UPDATE run_roles ro SET node_id = a.node_id FROM run, assign a
    WHERE ro.run_id = run.run_id AND ro.role = a.role
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN assign a
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, attempt, 'promoted', {{QUEUED}}, {{RUNNING}}, NULL FROM run
    UNION ALL
    {{hold_placed}}
)
SELECT (SELECT coalesce(array_agg(node_id), '{}') FROM slot), run.run_id, run.created_at, run.queue_rank,
       run.started_at, (SELECT array_agg(a.role ORDER BY a.role) FROM assign a WHERE run.run_id IS NOT NULL),
       (SELECT array_agg(a.node_id ORDER BY a.role) FROM assign a WHERE run.run_id IS NOT NULL)
FROM (SELECT 1) one LEFT JOIN run ON true

-- name: wake_promote
-- One promotion, in one statement and so one transaction.
--
-- It locks the planned nodes' free_nodes rows first, and only then a run: the first queued run
-- of the head's shape, in queue order from the head (@head) on, that no one else holds (runs of
-- one shape are interchangeable, so the planned nodes are paired with the picked run's roles by
-- their needs, byte order on both sides — roleSlots sorts the slots the same way — not by role
-- name). Only a writer taking the node as a lease holds its free_nodes row, and a lease taken
-- since this statement's snapshot has deleted it: a node leased meanwhile, or being leased by
-- another promotion or a submit right now, makes the count fall short before any run is
-- touched; the statement writes nothing and says so, and the wake tries the head on other
-- nodes. (Locking the nodes row instead let a node leased since the snapshot look free until
-- leases_pkey refused the insert, after the run was held; and a heartbeat renewing its advert
-- held that row and hid an idle node from every wake.)
--
-- Wakes meet at the head: every handler that frees a node wakes the queue. A wake that finds
-- the head held skips to the run behind it rather than queueing behind the holder, which
-- already holds its nodes, so from there its promotion cannot fail for want of a node and the
-- queue order is kept.
/* wake: promote */
WITH {{promote_slots}}, pick AS (
    SELECT r.run_id, r.width FROM runs r
    WHERE r.state = {{QUEUED}} AND r.shape = @head_shape::text AND NOT {{ahead r @head}}
      AND (SELECT count(*) FROM slot) = cardinality(@nodes::text[]) -- the nodes first
    ORDER BY r.shape, {{queue_order r}} LIMIT 1
    FOR UPDATE SKIP LOCKED
), {{promote_pick}}

-- name: wake_promote_protected
-- wake_promote for a protected head: the protected runs of its shape, in arrival order from the
-- head on.
/* wake: promote protected */
WITH {{promote_slots}}, pick AS (
    SELECT r.run_id, r.width FROM runs r
    WHERE r.state = {{QUEUED}} AND r.shape = @head_shape::text AND {{protected r}}
      AND NOT ({{arrival r}}) < (@head_created_at, @head_run_id)
      AND (SELECT count(*) FROM slot) = cardinality(@nodes::text[]) -- the nodes first
    ORDER BY r.shape, {{arrival r}} LIMIT 1
    FOR UPDATE SKIP LOCKED
), {{promote_pick}}

-- name: wake_let_go
-- The held nodes (@held) a wake did not place on, let go: from now on any wake may use them.
-- The wake sweeps again when this let one go, from a snapshot that sees it free.
/* wake: let go */
UPDATE free_nodes SET held_until = NULL
WHERE node_id = ANY (@held::text[]) AND held_until IS NOT NULL

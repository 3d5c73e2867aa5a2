-- The rules that several statements share, each written here once. A fragment's aliases name
-- the rows it reads: {{queue_order r}} orders runs called r. An alias given as @name stands
-- for named parameters instead (@name_created_at, @name_run_id, ...).

-- fragment: queue_order(r)
-- The queue's order: priority, higher first (queue_rank is 100 - priority), then arrival, kept
-- across requeues. head.before is its Go twin (TestQueueOrderInGoIsTheQueueOrderInSQL). The
-- wake takes protected runs before it (see protected).
r.queue_rank, r.created_at, r.run_id

-- fragment: queue_order_reversed(r)
-- queue_order backwards, the last queued run first: how a statement reads the last of a set of
-- queued runs without counting them (TestQueueOrderReversedIsTheQueueOrderBackwards).
r.queue_rank DESC, r.created_at DESC, r.run_id DESC

-- fragment: arrival(r)
-- Arrival order: how protected runs are taken among themselves, and what "oldest" means.
r.created_at, r.run_id

-- fragment: ahead(q, r)
-- Run q is ahead of run r in the queue.
({{queue_order q}}) < ({{queue_order r}})

-- fragment: protected(r)
-- The starvation rule: a queued run older than STARVATION_SECONDS, whatever its priority, is
-- placed before every run that is not, in arrival order among the protected, and keeps every
-- node it could use from younger runs. @starvation is written into the wake's statements as a
-- literal (Store.New), so that they take no parameter and keep one plan.
r.created_at < now() - @starvation::float8 * interval '1 second'

-- fragment: drained(n)
-- A node taking no new work: by its own say (draining, from its heartbeat) or an admin's.
(n.draining OR n.drain_requested_by IS NOT NULL)

-- fragment: quarantined(n)
-- A node out of scheduling for its health (migration 0015): by its agent, the system or an
-- admin. Like a drained node it finishes the lease it holds, and the fleet still counts it: a
-- run only it could serve queues for it rather than being refused.
(n.health = {{QUARANTINED}})

-- fragment: suspect(n)
-- A node with an infrastructure failure counted against it: the planner takes it only when no
-- healthy node serves (plan.Node.Suspect).
(n.health = {{SUSPECT}})

-- fragment: unreserved(n)
-- A node no health check is due on (migration 0016). A node with one due serves that check
-- alone until its outcome is applied (plan.Node.ReservedFor, serves_placed): the check goes
-- first on the node whatever the queue holds, and a submit never places on it.
n.check_run_id IS NULL

-- fragment: serves_placed(n)
-- A node taking work may serve the run being placed: it is unreserved, or reserved for that
-- very run (@check_run: the promotion's head; '' for a submit, which places no check).
({{unreserved n}} OR n.check_run_id = @check_run::text)

-- fragment: takes_work(n)
-- A node the queue may place on, lease aside: its advert is live, it is not drained and not
-- quarantined. An available node also holds no lease (statements find those through
-- free_nodes) and is unreserved, or reserved for the run placed.
n.advert_expires_at > now() AND NOT {{drained n}} AND NOT {{quarantined n}}

-- fragment: unheld(f)
-- A free node (its free_nodes row f) no report holds for its own wake (migration 0011), or no
-- longer: a hold ends by itself.
(f.held_until IS NULL OR f.held_until <= now())

-- fragment: wake_may_use(f)
-- A free node a wake may place on: unheld, or held for this wake (@held: the nodes its
-- caller's report freed and held; see Store.Report).
({{unheld f}} OR f.node_id = ANY (@held::text[]))

-- fragment: queued_shapes
-- The shapes of the queued runs, one row each (and a last NULL): a skip-scan over
-- runs_queue_by_shape, its cost growing with the number of shapes, not the depth of the queue.
-- A statement names it in its WITH RECURSIVE list.
shapes(shape) AS (
    (SELECT shape FROM runs WHERE state = {{QUEUED}} ORDER BY shape LIMIT 1)
    UNION ALL
    SELECT (SELECT r.shape FROM runs r WHERE r.state = {{QUEUED}} AND r.shape > s.shape ORDER BY r.shape LIMIT 1)
    FROM shapes s WHERE s.shape IS NOT NULL
)

-- fragment: node_state(n, l)
-- What GET /v1/nodes and a heartbeat's answer say a node is; l is its lease, if any.
CASE WHEN l.run_id IS NOT NULL THEN {{LEASED}}
     WHEN n.advert_expires_at <= now() THEN {{OFFLINE}}
     WHEN {{drained n}} THEN {{DRAINING}}
     ELSE {{IDLE}} END

-- fragment: capacity_standing(n, l, h)
-- How node n stands for a queued run it could serve (wire.Standings; a run's waiting.roles): l
-- is its lease and h the run holding it, if any. The causes that outlast a lease come first: a
-- drained node that finishes its run takes none after it. Available is takes_work, no lease and
-- unreserved: what the wake may place on.
CASE WHEN n.advert_expires_at <= now() THEN {{STANDING_OFFLINE}}
     WHEN {{quarantined n}} THEN {{STANDING_QUARANTINED}}
     WHEN {{drained n}} THEN {{STANDING_DRAINING}}
     WHEN h.kind = {{KIND_HOLD}} THEN {{STANDING_HELD}}
     WHEN h.kind = {{KIND_HEALTH_CHECK}} THEN {{STANDING_CHECKING}}
     WHEN l.run_id IS NOT NULL THEN {{STANDING_BUSY}}
     WHEN NOT {{unreserved n}} THEN {{STANDING_CHECKING}}
     ELSE {{STANDING_AVAILABLE}} END

-- fragment: check_shape(r)
-- A health check run's shape: its own, so that the wake walks it apart and no other run is ever
-- of it (promotion picks by shape). Every other shape is its runs' needs as a JSON list (Shape).
'check:' || r.run_id

-- fragment: shape_needs(s)
-- A shape's needs as a JSON list of each role's needs: none for a health check's, which wants
-- only the node reserved for it (TestAReportWithACheckQueuedFreesItsNode).
CASE WHEN s.shape LIKE 'check:%' THEN '[]'::jsonb ELSE s.shape::jsonb END

-- fragment: hold_end(r)
-- When a hold r placed now ends by itself (NULL for a run of another kind: no hold_seconds).
now() + r.hold_seconds * interval '1 second'

-- fragment: need_key(ro)
-- A role's needs as one string (labels never contain a comma): how the wake pairs planned
-- nodes with a picked run's roles. needKey is its Go twin (TestNeedKeyInGoIsNeedKeyInSQL).
array_to_string(ro.needs, ',')

-- fragment: node_step(s, r)
-- A step s of run r as its node is handed it (a heartbeat's steps, a result's next): what it may
-- do about it, its role and attempt, where every role of the run is, and the outputs of the
-- steps it waits for, keyed by step.
json_build_object('run_id', s.run_id, 'step_id', s.step_id, 'role', s.role, 'attempt', r.attempt,
    'spec', s.spec, 'state', s.state, 'runnable', {{runnable s r}}, 'cancel', r.cancel_requested_at IS NOT NULL,
    'keep_on_failure', r.keep_on_failure_seconds IS NOT NULL,
    'assigned', (SELECT coalesce(json_object_agg(ro.role, ro.node_id ORDER BY ro.ordinal), '{}')
                 FROM run_roles ro WHERE ro.run_id = s.run_id AND ro.node_id <> ''),
    'inputs', (SELECT coalesce(json_object_agg(d.step_id, coalesce(d.outputs, '{}') ORDER BY d.ordinal), '{}')
               FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after)))

-- fragment: runnable(s, r)
-- A step its node may start now: PENDING, its run not cancelling, every step it waits for
-- SUCCEEDED. The report path's runnable is its Go twin (TestRunnableInGoIsRunnableInSQL).
s.state = {{PENDING}} AND r.cancel_requested_at IS NULL AND NOT EXISTS (
    SELECT 1 FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after) AND d.state <> {{SUCCEEDED}})

-- Why queued runs wait (Store.ExplainWaiting, DESIGN.md "Why a run waits").

-- name: waiting
-- All a why reads, in one statement: the head of every queued shape (queue_heads: two index
-- lookups per shape, whatever the depth of the queue), and how the fleet stands for groups of
-- needs — those asked (@groups and @needs, paired: a group is one role's needs or every role's
-- of a shape, named by its key; a need is a need_key) and each head's roles'. Per group and
-- standing (capacity_standing): how many nodes have the labels of one of its needs, the runs
-- holding the busy ones that the viewer may see (@owner's, or any for @admin; a few), and some
-- of the nodes free to take work (the available ones, and those a health check due on them
-- reserves) for plan.Why's walk: as many as the heads' roles and the widest asked run's
-- (@widest) add up to, at most {{maxWalkNodes}}. The fleet is read once, however many
-- groups: each node with its lease and the lease's run, then matched against every need in
-- memory.
/* waiting */
WITH RECURSIVE {{queued_shapes}}, {{queue_heads}}, want AS (
    SELECT w.grp, string_to_array(w.need, ',') AS labels FROM unnest(@groups::text[], @needs::text[]) AS w(grp, need)
    UNION
    SELECT {{need_key ro}}, ro.needs FROM heads h JOIN run_roles ro ON ro.run_id = h.run_id
), fleet AS MATERIALIZED (
    SELECT n.node_id, n.labels, {{capacity_standing n l o}} AS standing, {{suspect n}} AS suspect,
           n.check_run_id, l.run_id IS NULL AND {{takes_work n}} AS free, o.name AS run_name, o.owner AS run_owner
    FROM nodes n LEFT JOIN leases l ON l.node_id = n.node_id LEFT JOIN runs o ON o.run_id = l.run_id
), capable AS (
    SELECT DISTINCT ON (w.grp, f.node_id) w.grp, f.* FROM want w JOIN fleet f ON f.labels @> w.labels
)
SELECT true, h.run_id, h.shape, h.created_at, h.queue_rank, h.protected, h.roles,
       NULL::text, NULL::text, NULL::int, NULL::json, NULL::json
FROM heads h
UNION ALL
SELECT false, NULL, NULL, NULL, NULL, NULL, NULL, c.grp, c.standing, count(*)::int,
       to_json((array_agg(DISTINCT jsonb_build_object('run_id', c.run_name, 'owner', c.run_owner))
                FILTER (WHERE c.standing = {{STANDING_BUSY}} AND (@admin::bool OR c.run_owner = @owner::text)))[1:{{busyRunsShown}}]),
       to_json((array_agg(json_build_object('ID', c.node_id, 'Labels', c.labels, 'Suspect', c.suspect,
                    'ReservedFor', coalesce(c.check_run_id, '')) ORDER BY c.node_id) FILTER (WHERE c.free))
               [1:least({{maxWalkNodes}}, @widest::int + (SELECT coalesce(sum(json_array_length(h.roles)), 0) FROM heads h))])
FROM capable c GROUP BY c.grp, c.standing

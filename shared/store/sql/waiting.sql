-- Why queued runs wait (Store.ExplainWaiting, DESIGN.md "Why a run waits").

-- name: waiting
-- All a why reads, in one statement: the head of every queued shape (queue_heads: two index
-- lookups per shape, whatever the depth of the queue), and how the fleet stands for groups of
-- needs — those asked (@groups and @needs, paired: a group is one role's needs or every role's
-- of a shape, named by its key; a need is a need_key) and each head's roles'. Per group and
-- standing (capacity_standing): how many nodes have the labels of one of its needs, counted
-- once (under the group's first need they have), the runs holding the busy ones that the viewer
-- may see (@owner's, or any for @admin; a few), and some of the nodes free to take work (the
-- available ones, and those a health check due on them reserves) for plan.Why's walk: as many
-- as the heads' roles and the widest asked run's (@widest) add up to, at most {{maxWalkNodes}}.
-- Each need's nodes are found through the labels index (nodes_labels), each with its lease and
-- the lease's run by their keys: the cost is the capable nodes', not the fleet's. With @fleet,
-- one more row counts every node and the live ones.
/* waiting */
WITH RECURSIVE {{queued_shapes}}, {{queue_heads}}, asked AS (
    SELECT w.grp, w.ord, string_to_array(w.need, ',') AS labels
    FROM unnest(@groups::text[], @needs::text[]) WITH ORDINALITY AS w(grp, need, ord)
), want AS (
    -- single: the group has one need, so no node can be counted twice under it.
    SELECT a.*, count(*) OVER (PARTITION BY a.grp) = 1 AS single FROM asked a
    UNION ALL
    -- Each head's roles looked up by its key (OFFSET 0 keeps it a lookup, not a scan of every
    -- run's roles).
    SELECT DISTINCT ON ({{need_key ro}}) {{need_key ro}}, 0, ro.needs, true
    FROM heads h CROSS JOIN LATERAL (SELECT ro.needs FROM run_roles ro WHERE ro.run_id = h.run_id OFFSET 0) ro
    WHERE NOT EXISTS (SELECT 1 FROM asked a WHERE a.grp = {{need_key ro}})
), capable AS (
    SELECT w.grp, n.node_id, n.labels, {{capacity_standing n l o}} AS standing, {{suspect n}} AS suspect, n.check_run_id,
           l.run_id IS NULL AND {{takes_work n}} AS free, o.name AS run_name, o.owner AS run_owner
    FROM want w JOIN nodes n ON n.labels @> w.labels
    LEFT JOIN leases l ON l.node_id = n.node_id
    LEFT JOIN LATERAL (SELECT o.name, o.owner, o.kind FROM runs o WHERE o.run_id = l.run_id OFFSET 0) o ON true
    WHERE w.single OR NOT EXISTS (SELECT 1 FROM want e WHERE e.grp = w.grp AND e.ord < w.ord AND n.labels @> e.labels)
)
SELECT true, h.run_id, h.shape, h.created_at, h.queue_rank, h.protected, h.roles,
       NULL::text, NULL::text, NULL::int, NULL::text[], NULL::text[], NULL::json, NULL::int
FROM heads h
UNION ALL
SELECT false, NULL, NULL, NULL, NULL, NULL, NULL, c.grp, c.standing, count(*)::int,
       (array_agg(c.run_name) FILTER (WHERE c.standing = {{STANDING_BUSY}} AND (@admin::bool OR c.run_owner = @owner::text)))[1:{{busyRunsShown}}],
       (array_agg(c.run_owner) FILTER (WHERE c.standing = {{STANDING_BUSY}} AND (@admin::bool OR c.run_owner = @owner::text)))[1:{{busyRunsShown}}],
       to_json((array_agg(json_build_object('ID', c.node_id, 'Labels', c.labels, 'Suspect', c.suspect,
                    'ReservedFor', coalesce(c.check_run_id, ''))) FILTER (WHERE c.free))
               [1:least({{maxWalkNodes}}, @widest::int + (SELECT coalesce(sum(json_array_length(h.roles)), 0) FROM heads h))]),
       NULL
FROM capable c GROUP BY c.grp, c.standing
UNION ALL
SELECT false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, count(*)::int, NULL, NULL, NULL,
       (count(*) FILTER (WHERE n.advert_expires_at > now()))::int
FROM nodes n WHERE @fleet::bool

-- Nodes leaving the fleet, and the queued runs no node left could ever serve.

-- name: remove_node_lock
-- The node first (the lock order, lock.go), with the epoch of its lease if it holds one.
/* remove node: lock */
SELECT (SELECT epoch FROM leases l WHERE l.node_id = n.node_id)
FROM nodes n WHERE n.node_id = $1 FOR UPDATE OF n

-- name: remove_node
/* remove node */
DELETE FROM nodes WHERE node_id = $1

-- name: retire_nodes
-- Nodes silent past NODE_RETIRE_AFTER leave the fleet. A node that still holds a lease is left
-- alone: its lease expires first and the reaper's first step takes it.
/* reap: retire nodes */
DELETE FROM nodes WHERE node_id IN (
    SELECT node_id FROM nodes n
    WHERE n.last_seen_at < now() - @retire::float8 * interval '1 second'
      AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id)
    LIMIT @batch::int FOR UPDATE SKIP LOCKED)
  AND last_seen_at < now() - @retire::float8 * interval '1 second'

-- fragment: fleet_fingerprint
-- A fingerprint of the fleet: its nodes and their labels.
(SELECT coalesce(md5(string_agg(node_id || ':' || array_to_string(labels, ','), ';' ORDER BY node_id)), '') FROM nodes)

-- name: fleet_print
/* unservable: fleet print */
SELECT {{fleet_fingerprint}}

-- name: unservable_shapes
-- The shapes of the queued runs that may fail unservable, each with its needs, read from one of
-- its runs' roles: a shape is a grouping key, and a health check's is its own (check_shape), its
-- needs — the node it checks included — only in its role.
/* unservable: shapes */
SELECT s.shape, (SELECT json_agg(ro.needs ORDER BY ro.ordinal) FROM run_roles ro WHERE ro.run_id = (
           SELECT r.run_id FROM runs r WHERE r.state = {{QUEUED}} AND r.shape = s.shape AND NOT r.wait_for_capacity LIMIT 1))
FROM (SELECT DISTINCT shape FROM runs WHERE state = {{QUEUED}} AND NOT wait_for_capacity) s

-- name: end_unservable
-- One batch of queued runs of a shape that no node of the fleet can serve fail — but only while
-- the fleet is still the fleet the decision was made over (same nodes, same labels): a node that
-- joined in between could serve them.
/* unservable: fail */
WITH due AS (
    SELECT r.run_id FROM runs r
    WHERE r.state = {{QUEUED}} AND r.shape = @shape::text AND NOT r.wait_for_capacity
      AND {{fleet_fingerprint}} = @fleet::text
    ORDER BY {{queue_order r}} LIMIT @batch::int
    FOR UPDATE SKIP LOCKED
), {{end_runs}}

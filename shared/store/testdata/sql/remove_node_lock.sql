/* remove node: lock */
SELECT (SELECT epoch FROM leases l WHERE l.node_id = n.node_id)
FROM nodes n WHERE n.node_id = $1 FOR UPDATE OF n

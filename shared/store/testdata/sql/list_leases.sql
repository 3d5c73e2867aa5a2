/* leases: list */
SELECT node_id, run_id, role, epoch, expires_at, expires_at > now()
FROM leases ORDER BY node_id

/* reap: expired leases */
SELECT node_id, epoch FROM leases WHERE expires_at < now() ORDER BY expires_at LIMIT $1

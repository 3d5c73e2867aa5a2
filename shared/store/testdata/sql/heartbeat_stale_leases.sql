/* heartbeat: leases under another boot */
SELECT node_id, epoch FROM leases WHERE node_id = $1 AND boot_id <> $2

/* holds: regrant after a restart */
WITH old AS (
    DELETE FROM leases l USING runs r
    WHERE l.node_id = $1 AND l.epoch = $2 AND r.run_id = l.run_id AND r.kind = 'hold' AND r.state = 'RUNNING'
    RETURNING l.node_id, l.run_id, l.role
)
INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
SELECT o.node_id, o.run_id, o.role, $3, now() + $4::float8 * interval '1 second' FROM old o
RETURNING run_id

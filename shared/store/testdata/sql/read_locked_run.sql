/* read a locked run */
SELECT (SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state,
                'after', s.after, 'tries', s.tries, 'retries', s.retries, 'exit_code', s.exit_code,
                'epoch', s.epoch, 'node_id', ro.node_id) ORDER BY s.ordinal)
          FROM steps s JOIN run_roles ro ON ro.run_id = s.run_id AND ro.role = s.role
          WHERE s.run_id = $1),
       l.epoch, l.boot_id, l.role, EXISTS (SELECT 1 FROM runs WHERE run_id = $1)
FROM (SELECT 1) one LEFT JOIN leases l ON l.run_id = $1 AND l.node_id = $2

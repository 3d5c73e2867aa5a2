/* node work */
SELECT lease.run_id, lease.epoch, lease.expires_at, (SELECT coalesce(json_agg(json_build_object('run_id', s.run_id, 'step_id', s.step_id, 'role', s.role, 'attempt', r.attempt,
    'spec', s.spec, 'state', s.state, 'runnable', s.state = 'PENDING' AND r.cancel_requested_at IS NULL AND NOT EXISTS (
    SELECT 1 FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after) AND d.state <> 'SUCCEEDED'), 'cancel', r.cancel_requested_at IS NOT NULL,
    'keep_on_failure', r.keep_on_failure_seconds IS NOT NULL,
    'assigned', (SELECT coalesce(json_object_agg(ro.role, ro.node_id ORDER BY ro.ordinal), '{}')
                 FROM run_roles ro WHERE ro.run_id = s.run_id AND ro.node_id <> ''),
    'inputs', (SELECT coalesce(json_object_agg(d.step_id, coalesce(d.outputs, '{}') ORDER BY d.ordinal), '{}')
               FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after))) ORDER BY s.ordinal), '[]')
     FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.role = lease.role
     WHERE r.run_id = lease.run_id AND s.state IN ('PENDING', 'RUNNING'))
FROM leases lease WHERE lease.node_id = $1 AND lease.boot_id = $2

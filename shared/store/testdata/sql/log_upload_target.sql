/* logs: upload target */
SELECT r.owner, r.attempt, s.tries,
       r.state = 'RUNNING' AND s.state = 'RUNNING' AND s.epoch = @epoch::bigint AND EXISTS (
           SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = r.run_id
             AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = s.role) AS fenced
FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.step_id = @step_id::text
WHERE r.run_id = @run_id::text

/* unservable: shapes */
SELECT s.shape, (SELECT json_agg(ro.needs ORDER BY ro.ordinal) FROM run_roles ro WHERE ro.run_id = (
           SELECT r.run_id FROM runs r WHERE r.state = 'QUEUED' AND r.shape = s.shape AND NOT r.wait_for_capacity LIMIT 1))
FROM (SELECT DISTINCT shape FROM runs WHERE state = 'QUEUED' AND NOT wait_for_capacity) s

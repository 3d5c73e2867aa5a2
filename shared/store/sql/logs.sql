-- Step logs: the fence of a node's upload URLs, and what a reader is told of a log. The chunks
-- themselves are in S3; step_logs holds what terminal reports said of them (migration 0014).

-- name: log_upload_target
-- Where node @node_id may upload the log of step @step_id of run @run_id (its key): the step's
-- current try, if the step is RUNNING under the lease the node holds on this boot at this
-- epoch — the fence a report has (report_step_update). fenced false: the step is no longer
-- this node's to log (the run ended, was requeued, the node restarted or is another).
/* logs: upload target */
SELECT r.owner, r.attempt, s.tries,
       r.state = {{RUNNING}} AND s.state = {{RUNNING}} AND s.epoch = @epoch::bigint AND EXISTS (
           SELECT 1 FROM leases l WHERE l.node_id = @node_id::text AND l.run_id = r.run_id
             AND l.epoch = @epoch::bigint AND l.boot_id = @boot_id::text AND l.role = s.role) AS fenced
FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.step_id = @step_id::text
WHERE r.run_id = @run_id::text

-- name: step_log_facts
-- A step's log in attempt @attempt of the run with key @key (0: the run's latest), as a reader
-- is told it: the run's names, the step as it stands, and the terminal report's summary of that
-- attempt, if any.
/* logs: facts */
SELECT r.name, r.owner, r.run_id, r.attempt, s.state, s.epoch, s.tries,
       l.state, l.bytes, l.sha256, l.uploaded
FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.step_id = @step_id::text
LEFT JOIN step_logs l ON l.run_id = r.run_id AND l.step_id = s.step_id
    AND l.attempt = CASE WHEN @attempt::int > 0 THEN @attempt::int ELSE r.attempt END
WHERE r.run_id = @key::text

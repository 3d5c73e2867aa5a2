/* logs: facts */
SELECT r.name, r.owner, r.run_id, r.attempt, s.state, s.epoch, s.tries,
       l.state, l.bytes, l.sha256, l.uploaded
FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.step_id = @step_id::text
LEFT JOIN step_logs l ON l.run_id = r.run_id AND l.step_id = s.step_id
    AND l.attempt = CASE WHEN @attempt::int > 0 THEN @attempt::int ELSE r.attempt END
WHERE r.run_id = @key::text

/* runs: history */
SELECT at, attempt, kind, from_state, to_state, reason, node_id
FROM run_events WHERE run_id = $1 ORDER BY event_id

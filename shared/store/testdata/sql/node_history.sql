/* nodes: history */
SELECT at, kind, from_state, to_state, reason, run_id FROM node_history
WHERE node_id = $1 ORDER BY event_id DESC LIMIT $2

/* events: claim of nodes */
WITH due AS (
    SELECT u.event_id FROM node_events_unpublished u JOIN node_history h ON h.event_id = u.event_id
    WHERE h.node_id = ANY (@nodes::text[]) AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.event_id LIMIT @limit::int
    FOR UPDATE OF u SKIP LOCKED
), c AS (
    UPDATE node_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
SELECT h.event_id, h.node_id, h.from_state, h.to_state, h.reason, h.by, h.at
FROM c JOIN node_history h ON h.event_id = c.event_id
ORDER BY h.event_id

/* events: claim node events */
WITH due AS (
    SELECT u.event_id FROM node_events_unpublished u
    WHERE u.recorded_at < now() - @older_than::float8 * interval '1 second'
      AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.recorded_at LIMIT @limit::int
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE node_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
SELECT h.event_id, h.node_id, h.from_state, h.to_state, h.reason, h.by, h.at
FROM c JOIN node_history h ON h.event_id = c.event_id
ORDER BY h.event_id

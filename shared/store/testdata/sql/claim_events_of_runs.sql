/* events: claim of runs */
WITH due AS (
    SELECT u.event_id FROM run_events e JOIN run_events_unpublished u ON u.event_id = e.event_id
    WHERE e.run_id = ANY (@runs::text[]) AND (u.claimed_until IS NULL OR u.claimed_until < now())
    ORDER BY u.event_id LIMIT @limit::int
    FOR UPDATE OF u SKIP LOCKED
), c AS (
    UPDATE run_events_unpublished u SET claimed_until = now() + @claim_for::float8 * interval '1 second'
    FROM due WHERE u.event_id = due.event_id
    RETURNING u.event_id
)
SELECT e.event_id,
       (SELECT count(*) FROM run_events x WHERE x.run_id = e.run_id AND x.event_id <= e.event_id),
       e.run_id, r.name, r.owner, r.kind, e.kind, e.from_state, e.to_state, e.reason, e.attempt, e.at, e.node_id,
       (SELECT coalesce(json_object_agg(ro.role, ro.node_id ORDER BY ro.ordinal), '{}')
          FROM run_roles ro WHERE ro.run_id = e.run_id AND ro.node_id <> '')
FROM c JOIN run_events e ON e.event_id = c.event_id JOIN runs r ON r.run_id = e.run_id
ORDER BY e.event_id

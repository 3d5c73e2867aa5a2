/* reap: prune */
WITH due AS (
    SELECT r.run_id FROM runs r
    WHERE r.finished_at < now() - @days::int * interval '1 day'
AND r.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
AND NOT (EXISTS (SELECT 1 FROM event_publishing WHERE only_row AND enabled)
         AND EXISTS (SELECT 1 FROM run_events e JOIN run_events_unpublished u ON u.event_id = e.event_id
                     WHERE e.run_id = r.run_id)) AND (@keys::text[] IS NULL OR r.run_id = ANY (@keys::text[]))
    ORDER BY r.finished_at LIMIT @batch::int
    FOR UPDATE SKIP LOCKED
), steps AS (
    DELETE FROM steps s USING due WHERE s.run_id = due.run_id
), roles AS (
    DELETE FROM run_roles ro USING due WHERE ro.run_id = due.run_id
), events AS (
    DELETE FROM run_events e USING due WHERE e.run_id = due.run_id
), gone AS (
    DELETE FROM runs r USING due WHERE r.run_id = due.run_id
    RETURNING r.run_id
)
SELECT count(*) FROM gone

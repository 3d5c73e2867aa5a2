/* reap: prune due */
SELECT r.owner, r.run_id, r.attempt > 1 OR r.started_at IS NOT NULL
FROM runs r WHERE r.finished_at < now() - @days::int * interval '1 day'
AND r.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
AND NOT (EXISTS (SELECT 1 FROM event_publishing WHERE only_row AND enabled)
         AND EXISTS (SELECT 1 FROM run_events e JOIN run_events_unpublished u ON u.event_id = e.event_id
                     WHERE e.run_id = r.run_id))
ORDER BY r.finished_at LIMIT @batch::int

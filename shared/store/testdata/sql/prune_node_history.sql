/* reap: prune node history */
DELETE FROM node_history WHERE event_id IN (
    SELECT h.event_id FROM node_history h
    WHERE h.at < now() - @days::int * interval '1 day'
      AND NOT EXISTS (SELECT 1 FROM node_events_unpublished u WHERE u.event_id = h.event_id)
    ORDER BY h.at LIMIT @batch::int)

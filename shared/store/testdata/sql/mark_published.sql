/* events: published */
DELETE FROM run_events_unpublished WHERE event_id = ANY ($1::bigint[])

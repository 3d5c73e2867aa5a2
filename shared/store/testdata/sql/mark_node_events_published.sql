/* events: node events published */
DELETE FROM node_events_unpublished WHERE event_id = ANY ($1::bigint[])

-- Run events out to EventBridge, through an outbox: an event is recorded in the transaction
-- that made the change (run_events, append-only), and, while publishing is on, marked
-- unpublished in the same transaction by a trigger — so a change committed is an event that
-- will be published, whatever happens to the handler after its COMMIT. The mark goes once
-- PutEvents accepted the event; a handler publishing it claims it for a moment first, so the
-- reaper, which publishes what handlers left, does not send it twice meanwhile.
CREATE TABLE event_publishing (
    only_row boolean NOT NULL DEFAULT true,
    -- Set at start-up by whoever knows the configuration (the migrate function at each deploy,
    -- make dev): on when EVENT_BUS_NAME names a bus.
    enabled  boolean NOT NULL DEFAULT false,
    CONSTRAINT event_publishing_pkey PRIMARY KEY (only_row),
    CONSTRAINT event_publishing_one_row CHECK (only_row)
);
INSERT INTO event_publishing DEFAULT VALUES;
ANALYZE event_publishing;

CREATE TABLE run_events_unpublished (
    event_id      bigint      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    CONSTRAINT run_events_unpublished_pkey PRIMARY KEY (event_id),
    CONSTRAINT run_events_unpublished_event_fkey FOREIGN KEY (event_id) REFERENCES run_events (event_id) ON DELETE CASCADE
);
-- The reaper's sweep: the oldest unpublished first.
CREATE INDEX run_events_unpublished_recorded ON run_events_unpublished (recorded_at);

CREATE FUNCTION run_events_mark_unpublished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM event_publishing WHERE only_row AND enabled) THEN
        INSERT INTO run_events_unpublished (event_id) VALUES (NEW.event_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_events_mark_unpublished AFTER INSERT ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_mark_unpublished();

-- Retention: the history stays append-only, except for the reaper pruning whole runs past
-- RUN_RETENTION_DAYS, which says so for its own transaction only
-- (set_config('mediator.pruning', 'on', true)). Anything else that deletes or rewrites an
-- event is still refused under the constraint's name.
CREATE OR REPLACE FUNCTION run_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('mediator.pruning', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'run_events is append-only'
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_events_append_only';
END $$;

-- The reaper finds runs past retention by when they finished.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

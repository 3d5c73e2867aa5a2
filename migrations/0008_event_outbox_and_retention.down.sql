DROP INDEX IF EXISTS runs_finished;
CREATE OR REPLACE FUNCTION run_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_events is append-only'
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_events_append_only';
END $$;
DROP TRIGGER IF EXISTS run_events_mark_unpublished ON run_events;
DROP FUNCTION IF EXISTS run_events_mark_unpublished();
DROP TABLE IF EXISTS run_events_unpublished;
DROP TABLE IF EXISTS event_publishing;

-- runs.queued_at and nodes.registered_at are read by nothing. The code stops writing them with
-- this release; they are dropped by a later one, because the release before this writes them
-- still (runs.queued_at explicitly; registered_at by its default), and within a release the
-- migrations only expand the schema, so that the previous code runs on the new one while a
-- deploy rolls out, and after a rollback. Nothing to do for queued_at (it is nullable);
-- registered_at loses its default and may be NULL from now on.
ALTER TABLE nodes ALTER COLUMN registered_at DROP DEFAULT, ALTER COLUMN registered_at DROP NOT NULL;

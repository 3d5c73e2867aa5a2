-- runs.queued_at and nodes.registered_at are read and written by nothing, in this release or in
-- the one before it (no code writes them since 0006), so the previous code still runs on this
-- schema while a deploy rolls out, and after a rollback (infra/README.md, "Rolling back a
-- release"). Dropping a column only marks it so in the catalog: no table is rewritten, and the
-- lock it takes is held for that moment.
ALTER TABLE runs DROP COLUMN queued_at;
ALTER TABLE nodes DROP COLUMN registered_at;

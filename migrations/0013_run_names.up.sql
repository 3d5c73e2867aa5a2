-- A run's id belongs to its owner: two owners may each have a run `nightly-42`, and neither
-- learns of the other's. The id a client chose is now runs.name, unique per owner
-- (runs_owner_name_key); runs.run_id stays the run's key, unique across owners, which every
-- table naming a run references (leases_held_by_running_run included) and which nodes, events and
-- logs name it by. A run stored before keeps its id as its key. The listing order and its
-- indexes take the name before the key, so that a client's page boundary (created_at, name) says
-- nothing of a key.
ALTER TABLE runs ADD COLUMN name mediator_id;
UPDATE runs SET name = run_id;
ALTER TABLE runs ALTER COLUMN name SET NOT NULL;
ALTER TABLE runs ADD CONSTRAINT runs_owner_name_key UNIQUE (owner, name);
-- An admin addresses a run by its name across owners.
CREATE INDEX runs_by_name ON runs (name);
DROP INDEX runs_recent, runs_owner_recent, runs_state_recent, runs_owner_state_recent;
CREATE INDEX runs_recent ON runs (created_at DESC, name DESC, run_id DESC);
CREATE INDEX runs_owner_recent ON runs (owner, created_at DESC, name DESC, run_id DESC);
CREATE INDEX runs_state_recent ON runs (state, created_at DESC, name DESC, run_id DESC);
CREATE INDEX runs_owner_state_recent ON runs (owner, state, created_at DESC, name DESC, run_id DESC);

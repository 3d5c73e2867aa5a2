-- Runs whose names another owner shares keep their keys as their ids.
DROP INDEX runs_recent, runs_owner_recent, runs_state_recent, runs_owner_state_recent, runs_by_name;
ALTER TABLE runs DROP CONSTRAINT runs_owner_name_key;
ALTER TABLE runs DROP COLUMN name;
CREATE INDEX runs_recent ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_owner_recent ON runs (owner, created_at DESC, run_id DESC);
CREATE INDEX runs_state_recent ON runs (state, created_at DESC, run_id DESC);
CREATE INDEX runs_owner_state_recent ON runs (owner, state, created_at DESC, run_id DESC);

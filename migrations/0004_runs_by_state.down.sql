DROP INDEX IF EXISTS runs_owner_state_recent;
DROP INDEX IF EXISTS runs_state_recent;

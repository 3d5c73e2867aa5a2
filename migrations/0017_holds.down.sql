DROP INDEX IF EXISTS runs_holds_ending;
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_of_run_kind, DROP CONSTRAINT IF EXISTS steps_not_of_a_hold,
    DROP COLUMN IF EXISTS run_kind;
-- Holds go with the kind: run_events lets a pruning session delete (prune_switch).
SELECT set_config('mediator.pruning', 'on', false);
DELETE FROM leases WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'hold');
DELETE FROM run_events WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'hold');
DELETE FROM run_roles WHERE run_id IN (SELECT run_id FROM runs WHERE kind = 'hold');
DELETE FROM runs WHERE kind = 'hold';
SELECT set_config('mediator.pruning', '', false);
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_run_id_kind_key, DROP CONSTRAINT IF EXISTS runs_running_hold_ends,
    DROP CONSTRAINT IF EXISTS runs_hold_ends_only_for_holds, DROP CONSTRAINT IF EXISTS runs_hold_seconds_positive,
    DROP CONSTRAINT IF EXISTS runs_hold_iff_hold_seconds, DROP COLUMN IF EXISTS hold_ends_at, DROP COLUMN IF EXISTS hold_seconds,
    DROP CONSTRAINT runs_kind_known, ADD CONSTRAINT runs_kind_known CHECK (kind IN ('run', 'health_check'));

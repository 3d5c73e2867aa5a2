DROP INDEX IF EXISTS runs_debug_of;
DROP INDEX IF EXISTS runs_debug_hold;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_debug_of_fkey, DROP CONSTRAINT IF EXISTS runs_debug_hold_fkey,
    DROP CONSTRAINT IF EXISTS runs_debug_of_is_a_hold, DROP CONSTRAINT IF EXISTS runs_debug_hold_of_a_run,
    DROP CONSTRAINT IF EXISTS runs_keep_on_failure_only_for_runs, DROP CONSTRAINT IF EXISTS runs_keep_on_failure_positive,
    DROP COLUMN IF EXISTS debug_of, DROP COLUMN IF EXISTS debug_hold, DROP COLUMN IF EXISTS keep_on_failure_seconds;

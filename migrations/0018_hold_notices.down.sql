ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_hold_warned_only_for_holds, DROP COLUMN IF EXISTS hold_warned_for;

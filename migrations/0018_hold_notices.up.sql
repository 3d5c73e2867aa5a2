-- Hold notices (issue 32): the reaper warns once of each end of a placed hold that nears
-- (event hold_expiring). It remembers the end it warned of, not that it warned: an extend
-- moves hold_ends_at away from it, and the new end is warned of in its turn.
ALTER TABLE runs ADD COLUMN hold_warned_for timestamptz,
    ADD CONSTRAINT runs_hold_warned_only_for_holds CHECK (hold_warned_for IS NULL OR kind = 'hold');

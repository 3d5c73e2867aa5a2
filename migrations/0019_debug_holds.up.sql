-- Keeping the board of a failed run (issue 32): a run may ask that the nodes whose step failed
-- pass, when it settles FAILED step_failed, to a hold of its owner's for a post-mortem — in the
-- settling transaction, so no other run can take them in between. Each names the other.
ALTER TABLE runs ADD COLUMN keep_on_failure_seconds integer,
    ADD COLUMN debug_hold text,
    ADD COLUMN debug_of text,
    ADD CONSTRAINT runs_keep_on_failure_positive CHECK (keep_on_failure_seconds > 0),
    ADD CONSTRAINT runs_keep_on_failure_only_for_runs CHECK (keep_on_failure_seconds IS NULL OR kind = 'run'),
    ADD CONSTRAINT runs_debug_hold_of_a_run CHECK (debug_hold IS NULL OR kind = 'run'),
    ADD CONSTRAINT runs_debug_of_is_a_hold CHECK (debug_of IS NULL OR kind = 'hold'),
    ADD CONSTRAINT runs_debug_hold_fkey FOREIGN KEY (debug_hold) REFERENCES runs (run_id) ON DELETE SET NULL,
    ADD CONSTRAINT runs_debug_of_fkey FOREIGN KEY (debug_of) REFERENCES runs (run_id) ON DELETE SET NULL;
-- The foreign keys' lookups when a run is pruned.
CREATE INDEX runs_debug_hold ON runs (debug_hold) WHERE debug_hold IS NOT NULL;
CREATE INDEX runs_debug_of ON runs (debug_of) WHERE debug_of IS NOT NULL;

-- Holds (issue 32): a run of kind hold has no steps and a length; placed, its nodes are leased
-- until the owner releases it, its time is up, or it is cancelled or loses a node.
ALTER TABLE runs DROP CONSTRAINT runs_kind_known,
    ADD CONSTRAINT runs_kind_known CHECK (kind IN ('run', 'health_check', 'hold')),
    ADD COLUMN hold_seconds integer,
    -- When a placed hold ends by itself; only a conditional write moves it (Store.ExtendHold).
    ADD COLUMN hold_ends_at timestamptz,
    ADD CONSTRAINT runs_hold_iff_hold_seconds CHECK ((kind = 'hold') = (hold_seconds IS NOT NULL)),
    ADD CONSTRAINT runs_hold_seconds_positive CHECK (hold_seconds > 0),
    ADD CONSTRAINT runs_hold_ends_only_for_holds CHECK (hold_ends_at IS NULL OR kind = 'hold'),
    ADD CONSTRAINT runs_running_hold_ends CHECK (kind <> 'hold' OR state <> 'RUNNING' OR hold_ends_at IS NOT NULL),
    -- The target of steps_of_run_kind: a step names its run's kind, which a CHECK there can see.
    ADD CONSTRAINT runs_run_id_kind_key UNIQUE (run_id, kind);

-- A hold has no steps: each step names its run's kind through a key, as a lease names its
-- run's state (leases_held_by_running_run), and that kind is never hold.
ALTER TABLE steps ADD COLUMN run_kind text NOT NULL DEFAULT 'run';
UPDATE steps s SET run_kind = r.kind FROM runs r WHERE r.run_id = s.run_id AND r.kind <> 'run';
ALTER TABLE steps ADD CONSTRAINT steps_not_of_a_hold CHECK (run_kind <> 'hold'),
    ADD CONSTRAINT steps_of_run_kind FOREIGN KEY (run_id, run_kind) REFERENCES runs (run_id, kind);

-- The reaper's holds whose time is up.
CREATE INDEX runs_holds_ending ON runs (hold_ends_at) WHERE state = 'RUNNING' AND kind = 'hold';

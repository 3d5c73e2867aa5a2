-- The system's own pulse, in one row. A lease expires when its holder stops renewing it; but
-- when the system itself could accept no heartbeat (the database down, the heartbeat path
-- broken) for longer than a lease, every lease expires at once, and reaping them would fail
-- or requeue every healthy run. The reaper tells the two apart by this row: heard_at is the
-- last heartbeat accepted anywhere (NULL before the first: no silence before it counts), and a
-- heartbeat that ends a silence longer than a lease records it (quiet_from, quiet_until).
-- Heartbeats write it at most once a second and never wait for it; only the reaper writes
-- graced_at, when it granted the outage grace.
CREATE TABLE heartbeat_pulse (
    only_row    boolean     NOT NULL DEFAULT true,
    heard_at    timestamptz,
    quiet_from  timestamptz,
    quiet_until timestamptz,
    graced_at   timestamptz,
    CONSTRAINT heartbeat_pulse_pkey PRIMARY KEY (only_row),
    CONSTRAINT heartbeat_pulse_one_row CHECK (only_row),
    CONSTRAINT heartbeat_pulse_quiet_whole CHECK ((quiet_from IS NULL) = (quiet_until IS NULL) AND quiet_from <= quiet_until)
);
INSERT INTO heartbeat_pulse DEFAULT VALUES;
-- One row, and the planner should know it before autovacuum gets round to it.
ANALYZE heartbeat_pulse;

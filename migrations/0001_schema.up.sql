-- Mediator's schema. Every invariant of DESIGN.md that a constraint can hold is one, with a
-- name: the store maps those names to its errors and the tests break each one on purpose.
BEGIN;

-- One shape for every identifier a client chooses (run_id, node_id): printable, no spaces,
-- short enough for a log line and an index key.
CREATE DOMAIN mediator_id AS text
    CONSTRAINT mediator_id_format CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$');

CREATE TABLE nodes (
    node_id           mediator_id NOT NULL,
    labels            text[]      NOT NULL,
    -- Changes every time the node's agent starts; a heartbeat with another one is a restart.
    boot_id           text        NOT NULL,
    draining          boolean     NOT NULL DEFAULT false,
    -- The advert is live until this moment (now() + ADVERT_TTL at each heartbeat).
    advert_expires_at timestamptz NOT NULL,
    registered_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT nodes_pkey PRIMARY KEY (node_id),
    CONSTRAINT nodes_boot_id_format CHECK (boot_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT nodes_labels_bounded CHECK (cardinality(labels) <= 64),
    -- The target of leases_held_under_current_boot.
    CONSTRAINT nodes_node_id_boot_id_key UNIQUE (node_id, boot_id)
);

CREATE TABLE runs (
    run_id              mediator_id NOT NULL,
    -- The principal that submitted it ("client:alice", "admin:ops"); others get 404.
    owner               text        NOT NULL,
    state               text        NOT NULL,
    reason              text,
    -- sha256 of the canonical request: a resubmission is 200 only when it is the same request.
    request_hash        bytea       NOT NULL,
    -- The roles' needs, canonical and sorted: runs with one shape compete for the same nodes,
    -- so the wake looks at one head per shape instead of walking the whole queue.
    shape               text        NOT NULL,
    width               integer     NOT NULL,
    attempt             integer     NOT NULL DEFAULT 1,
    max_attempts        integer     NOT NULL,
    timeout_seconds     integer,
    queue_timeout_seconds integer,
    wait_for_capacity   boolean     NOT NULL DEFAULT false,
    metadata            jsonb       NOT NULL DEFAULT '{}',
    -- Arrival: the queue order is (created_at, run_id), kept across requeues.
    created_at          timestamptz NOT NULL DEFAULT now(),
    queued_at           timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    -- When the current state gives up: queue_timeout_seconds while QUEUED, timeout_seconds
    -- while RUNNING. One column so the reaper finds both through one small index.
    deadline_at         timestamptz,
    cancel_requested_at timestamptz,
    cancel_reason       text,
    CONSTRAINT runs_pkey PRIMARY KEY (run_id),                                   -- I4
    CONSTRAINT runs_state_valid CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    CONSTRAINT runs_finished_at_iff_terminal                                      -- I5
        CHECK ((finished_at IS NOT NULL) = (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))),
    CONSTRAINT runs_reason_iff_failed_or_cancelled
        CHECK ((reason IS NOT NULL) = (state IN ('FAILED', 'CANCELLED'))),
    CONSTRAINT runs_reason_valid CHECK (reason IN ('no_capable_node', 'too_wide', 'step_failed',
        'lease_expired', 'node_restarted', 'node_removed', 'timeout', 'queue_timeout', 'cancelled')),
    CONSTRAINT runs_running_has_started_at CHECK (state <> 'RUNNING' OR started_at IS NOT NULL),
    CONSTRAINT runs_attempt_within_max CHECK (attempt >= 1 AND attempt <= max_attempts),
    CONSTRAINT runs_width_positive CHECK (width >= 1),
    CONSTRAINT runs_timeouts_positive CHECK (coalesce(timeout_seconds, 1) > 0 AND coalesce(queue_timeout_seconds, 1) > 0),
    -- The target of leases_held_by_running_run (I2).
    CONSTRAINT runs_run_id_state_key UNIQUE (run_id, state)
);

-- The queue walk: arrival order within one shape, and the skip-scan over shapes.
CREATE INDEX runs_queue_by_shape ON runs (shape, created_at, run_id) WHERE state = 'QUEUED';
-- Arrival order over the whole queue: queue_position and GET /v1/queue.
CREATE INDEX runs_queue ON runs (created_at, run_id) WHERE state = 'QUEUED';
-- Reaper: the run and queue timeouts.
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL AND state IN ('QUEUED', 'RUNNING');
-- Reaper: cancel grace and the RUNNING set (bounded by the fleet: a RUNNING run holds a lease).
CREATE INDEX runs_running ON runs (started_at) WHERE state = 'RUNNING';
-- GET /v1/runs: newest first, per owner and for admins.
CREATE INDEX runs_owner_recent ON runs (owner, created_at DESC, run_id DESC);
CREATE INDEX runs_recent ON runs (created_at DESC, run_id DESC);

CREATE TABLE run_roles (
    run_id  text    NOT NULL,
    role    text    NOT NULL,
    ordinal integer NOT NULL,
    needs   text[]  NOT NULL,
    -- '' while the run holds no node for this role (I3).
    node_id text    NOT NULL DEFAULT '',
    CONSTRAINT run_roles_pkey PRIMARY KEY (run_id, role),                         -- I4
    CONSTRAINT run_roles_run_fkey FOREIGN KEY (run_id) REFERENCES runs (run_id),
    CONSTRAINT run_roles_role_format CHECK (role ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    -- The target of leases_match_role_assignment.
    CONSTRAINT run_roles_assignment_key UNIQUE (run_id, role, node_id)
);
-- Each role of a run gets its own node.
CREATE UNIQUE INDEX run_roles_distinct_nodes ON run_roles (run_id, node_id) WHERE node_id <> '';

CREATE TABLE steps (
    run_id      text    NOT NULL,
    step_id     text    NOT NULL,
    role        text    NOT NULL,
    ordinal     integer NOT NULL,
    after       text[]  NOT NULL DEFAULT '{}',
    spec        jsonb   NOT NULL DEFAULT '{}',
    retries     integer NOT NULL DEFAULT 0,
    tries       integer NOT NULL DEFAULT 0,
    state       text    NOT NULL DEFAULT 'PENDING',
    exit_code   integer,
    message     text,
    output      text,
    -- The lease epoch under which the last report was accepted: a repeated report is
    -- recognised by it after the lease itself is gone.
    epoch       bigint,
    started_at  timestamptz,
    finished_at timestamptz,
    CONSTRAINT steps_pkey PRIMARY KEY (run_id, step_id),                          -- I4
    CONSTRAINT steps_role_fkey FOREIGN KEY (run_id, role) REFERENCES run_roles (run_id, role),
    CONSTRAINT steps_state_valid CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'SKIPPED')),
    CONSTRAINT steps_finished_at_iff_terminal
        CHECK ((finished_at IS NOT NULL) = (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'SKIPPED'))),
    CONSTRAINT steps_tries_within_retries CHECK (retries >= 0 AND tries >= 0 AND tries <= retries + 1)
);

-- Epochs only grow: a report carrying an older one is from a lease that no longer exists.
CREATE SEQUENCE lease_epoch AS bigint;

CREATE TABLE leases (
    node_id    text        NOT NULL,
    run_id     text        NOT NULL,
    -- Always 'RUNNING': together with the foreign key below it says a lease can only point
    -- at a RUNNING run.
    run_state  text        NOT NULL DEFAULT 'RUNNING',
    role       text        NOT NULL,
    boot_id    text        NOT NULL,
    epoch      bigint      NOT NULL DEFAULT nextval('lease_epoch'),
    granted_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT leases_pkey PRIMARY KEY (node_id),                                  -- I1
    CONSTRAINT leases_epoch_key UNIQUE (epoch),
    CONSTRAINT leases_run_state_running CHECK (run_state = 'RUNNING'),
    -- I2: committing a run that is not RUNNING while a lease still points at it fails at
    -- COMMIT. Deferred, so a settle may change the state and release the leases in either
    -- order inside its transaction.
    CONSTRAINT leases_held_by_running_run FOREIGN KEY (run_id, run_state)
        REFERENCES runs (run_id, state) DEFERRABLE INITIALLY DEFERRED,
    -- The lease is the node the run's role was given, not some other node.
    CONSTRAINT leases_match_role_assignment FOREIGN KEY (run_id, role, node_id)
        REFERENCES run_roles (run_id, role, node_id) DEFERRABLE INITIALLY DEFERRED,
    -- A restart (new boot_id) must release the lease held under the old boot in the same
    -- transaction: no lease outlives the boot that was granted it.
    CONSTRAINT leases_held_under_current_boot FOREIGN KEY (node_id, boot_id)
        REFERENCES nodes (node_id, boot_id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX leases_run ON leases (run_id);
CREATE INDEX leases_expiry ON leases (expires_at);

-- I3: a QUEUED run holds nothing. Its leases are already refused by I2; these two triggers
-- refuse, at commit, a QUEUED run with a role still naming a node.
CREATE FUNCTION runs_queued_holds_nothing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runs r JOIN run_roles ro ON ro.run_id = r.run_id
               WHERE r.run_id = NEW.run_id AND r.state = 'QUEUED' AND ro.node_id <> '') THEN
        RAISE EXCEPTION 'a QUEUED run holds no node (run %)', NEW.run_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'runs_queued_holds_nothing';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER runs_queued_holds_nothing AFTER INSERT OR UPDATE OF state ON runs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.state = 'QUEUED')
    EXECUTE FUNCTION runs_queued_holds_nothing();
CREATE CONSTRAINT TRIGGER run_roles_queued_holds_nothing AFTER INSERT OR UPDATE OF node_id ON run_roles
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.node_id <> '')
    EXECUTE FUNCTION runs_queued_holds_nothing();

-- A run that has settled has no step left to do: every step is terminal.
CREATE FUNCTION runs_settled_with_steps_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM steps s WHERE s.run_id = NEW.run_id
               AND s.state IN ('PENDING', 'RUNNING')) THEN
        RAISE EXCEPTION 'a settled run has only terminal steps (run %)', NEW.run_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'runs_settled_with_steps_final';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER runs_settled_with_steps_final AFTER INSERT OR UPDATE OF state ON runs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))
    EXECUTE FUNCTION runs_settled_with_steps_final();

-- The history of every run: one row per state change, never changed afterwards.
CREATE TABLE run_events (
    event_id   bigint GENERATED ALWAYS AS IDENTITY,
    run_id     text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    attempt    integer     NOT NULL,
    kind       text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    reason     text,
    node_id    text,
    CONSTRAINT run_events_pkey PRIMARY KEY (event_id),
    CONSTRAINT run_events_run_fkey FOREIGN KEY (run_id) REFERENCES runs (run_id)
);
CREATE INDEX run_events_run ON run_events (run_id, event_id);
-- A run enters RUNNING at most once per attempt: a double promotion cannot commit.
CREATE UNIQUE INDEX run_events_running_once_per_attempt ON run_events (run_id, attempt)
    WHERE to_state = 'RUNNING' AND from_state IS DISTINCT FROM 'RUNNING';

CREATE FUNCTION run_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_events is append-only'
        USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'run_events_append_only';
END $$;
CREATE TRIGGER run_events_append_only BEFORE UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_append_only();

COMMIT;

-- Node health (issue 31). A node is healthy, suspect (an infrastructure failure counted against
-- it), or quarantined: it takes no new lease, and finishes the one it holds. Who quarantined it
-- decides who may lift it: its own agent (self), the count or a failed health check (system),
-- or an admin (admin:<id>), whose quarantine only an admin lifts.
ALTER TABLE nodes
    ADD COLUMN health         text        NOT NULL DEFAULT 'healthy',
    ADD COLUMN health_reason  text,
    -- Consecutive infrastructure failures on the node: a success on it resets the count.
    ADD COLUMN infra_failures integer     NOT NULL DEFAULT 0,
    ADD COLUMN health_since   timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN quarantined_by text,
    ADD CONSTRAINT nodes_health_state CHECK (health IN ('healthy', 'suspect', 'quarantined')),
    ADD CONSTRAINT nodes_infra_failures_not_negative CHECK (infra_failures >= 0),
    ADD CONSTRAINT nodes_quarantined_by_iff_quarantined CHECK ((quarantined_by IS NOT NULL) = (health = 'quarantined')),
    ADD CONSTRAINT nodes_quarantined_by_format CHECK (quarantined_by IN ('self', 'system') OR quarantined_by ~ '^admin:.+$'),
    ADD CONSTRAINT nodes_health_reason_bounded CHECK (length(health_reason) <= 1024);

-- Every node carries node_id=<its id> besides what it advertises (wire.NodeIDLabel): one more.
ALTER TABLE nodes DROP CONSTRAINT nodes_labels_bounded,
    ADD CONSTRAINT nodes_labels_bounded CHECK (cardinality(labels) <= 65);

-- A run's kind: a client's run, or a health check the system placed on one node.
ALTER TABLE runs ADD COLUMN kind text NOT NULL DEFAULT 'run',
    ADD CONSTRAINT runs_kind_known CHECK (kind IN ('run', 'health_check'));

-- A node's history: every change of its health, and every lease granted and released (by a
-- trigger on leases, so that no writer of a lease can forget it). Read newest first, a few
-- dozen at a time (node_history_of_node); the reaper prunes it with RUN_RETENTION_DAYS. Not
-- tied to the node's row: a node removed and registered again keeps what happened to it.
CREATE TABLE node_history (
    event_id   bigint      GENERATED ALWAYS AS IDENTITY,
    node_id    text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    reason     text,
    run_id     text,
    -- Who made a health change: self, system, or admin:<id>.
    by         text,
    CONSTRAINT node_history_pkey PRIMARY KEY (event_id),
    CONSTRAINT node_history_kind CHECK (kind IN ('health', 'lease')),
    CONSTRAINT node_history_health_states CHECK (kind <> 'health' OR (
        from_state IN ('healthy', 'suspect', 'quarantined') AND to_state IN ('healthy', 'suspect', 'quarantined')
        AND from_state <> to_state AND by IS NOT NULL)),
    CONSTRAINT node_history_lease_states CHECK (kind <> 'lease' OR (to_state IN ('leased', 'released') AND run_id IS NOT NULL))
);
CREATE INDEX node_history_of_node ON node_history (node_id, event_id DESC);
CREATE INDEX node_history_at ON node_history (at);

CREATE FUNCTION node_history_of_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO node_history (node_id, kind, from_state, to_state, run_id)
        VALUES (NEW.node_id, 'lease', NULL, 'leased', NEW.run_id);
    ELSE
        INSERT INTO node_history (node_id, kind, from_state, to_state, run_id)
        VALUES (OLD.node_id, 'lease', 'leased', 'released', OLD.run_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER node_history_of_leases AFTER INSERT OR DELETE ON leases
    FOR EACH ROW EXECUTE FUNCTION node_history_of_leases();

-- Node events out, through the same outbox as run events (migration 0008): a health change is
-- marked unpublished in its own transaction while publishing is on.
CREATE TABLE node_events_unpublished (
    event_id      bigint      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    CONSTRAINT node_events_unpublished_pkey PRIMARY KEY (event_id),
    CONSTRAINT node_events_unpublished_event_fkey FOREIGN KEY (event_id) REFERENCES node_history (event_id) ON DELETE CASCADE
);
CREATE INDEX node_events_unpublished_recorded ON node_events_unpublished (recorded_at);

CREATE FUNCTION node_events_mark_unpublished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'health' AND EXISTS (SELECT 1 FROM event_publishing WHERE only_row AND enabled) THEN
        INSERT INTO node_events_unpublished (event_id) VALUES (NEW.event_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER node_events_mark_unpublished AFTER INSERT ON node_history
    FOR EACH ROW EXECUTE FUNCTION node_events_mark_unpublished();

-- Health checks an admin registered: a one-role run's steps, for the nodes whose labels hold
-- needs, run on a node whose health is in doubt, or every every_seconds.
CREATE TABLE health_checks (
    name          mediator_id NOT NULL,
    needs         text[]      NOT NULL,
    steps         jsonb       NOT NULL,
    every_seconds integer,
    updated_by    text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT health_checks_pkey PRIMARY KEY (name),
    CONSTRAINT health_checks_every_positive CHECK (every_seconds > 0),
    CONSTRAINT health_checks_needs_bounded CHECK (cardinality(needs) <= 64),
    CONSTRAINT health_checks_steps_array CHECK (jsonb_typeof(steps) = 'array')
);

-- free_nodes lists the nodes no lease holds. A submit looking for a free board, and a wake
-- looking for a node a queued run could use, read it instead of the whole fleet: without it,
-- finding a free board costs a scan of every board and a lease lookup for each, on every
-- submit and every wake, at any utilisation.
--
-- Triggers keep it: a lease taken removes the node, a lease released puts it back (at a new
-- random place), a new node starts in it, a removed node leaves it. Nothing else writes it.
-- There is deliberately no foreign key to nodes: its check would take a key-share lock on the
-- node inside every release, and the restart path, which locks the node before the run,
-- would deadlock with a report that locks the run before the lease.
CREATE TABLE free_nodes (
    node_id text NOT NULL,
    -- A random place, new each time the node comes free: each submit starts its search at a
    -- place of its own, so concurrent submits find different nodes instead of colliding.
    spread  double precision NOT NULL DEFAULT random(),
    CONSTRAINT free_nodes_pkey PRIMARY KEY (node_id)
);
CREATE INDEX free_nodes_spread ON free_nodes (spread);

CREATE FUNCTION free_nodes_follow_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        DELETE FROM free_nodes WHERE node_id = NEW.node_id;
    ELSE
        INSERT INTO free_nodes (node_id) VALUES (OLD.node_id) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER leases_keep_free_nodes AFTER INSERT OR DELETE ON leases
    FOR EACH ROW EXECUTE FUNCTION free_nodes_follow_leases();

CREATE FUNCTION free_nodes_follow_nodes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO free_nodes (node_id) VALUES (NEW.node_id) ON CONFLICT DO NOTHING;
    ELSE
        DELETE FROM free_nodes WHERE node_id = OLD.node_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER nodes_keep_free_nodes AFTER INSERT OR DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION free_nodes_follow_nodes();

INSERT INTO free_nodes (node_id)
SELECT n.node_id FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id);

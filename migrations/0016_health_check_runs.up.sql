-- Health checks placed (issue 31). A health_check run names its check and the node it checks;
-- the node names the check due on it (check_run_id) from the moment it is scheduled until its
-- outcome is applied: meanwhile the node serves that run and nothing else (sql/rules.sql
-- reserved_for), so the check goes first on it without any queue order to get wrong.
ALTER TABLE runs ADD COLUMN check_name text, ADD COLUMN check_node text,
    ADD CONSTRAINT runs_health_check_names_check_and_node
        CHECK ((kind = 'health_check') = (check_name IS NOT NULL AND check_node IS NOT NULL));

-- A node's last check of each name: when a periodic check is due again.
CREATE INDEX runs_checks_of_node ON runs (check_node, check_name, created_at DESC) WHERE check_node IS NOT NULL;

ALTER TABLE nodes ADD COLUMN check_run_id text,
    ADD CONSTRAINT nodes_check_run_fkey FOREIGN KEY (check_run_id) REFERENCES runs (run_id) ON DELETE SET NULL;

-- The nodes with a check due: the reaper's sweep of checks that ended, and the foreign key's
-- lookup when a run is pruned.
CREATE INDEX nodes_check_due ON nodes (check_run_id) WHERE check_run_id IS NOT NULL;

DROP TABLE IF EXISTS health_checks;
DROP TABLE IF EXISTS node_events_unpublished;
DROP FUNCTION IF EXISTS node_events_mark_unpublished() CASCADE;
DROP TRIGGER IF EXISTS node_history_of_leases ON leases;
DROP FUNCTION IF EXISTS node_history_of_leases();
DROP TABLE IF EXISTS node_history;
UPDATE nodes SET labels = array_remove(labels, 'node_id=' || node_id);
ALTER TABLE nodes DROP CONSTRAINT nodes_labels_bounded,
    ADD CONSTRAINT nodes_labels_bounded CHECK (cardinality(labels) <= 64);
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_kind_known, DROP COLUMN IF EXISTS kind;
ALTER TABLE nodes DROP CONSTRAINT IF EXISTS nodes_health_state, DROP CONSTRAINT IF EXISTS nodes_infra_failures_not_negative,
    DROP CONSTRAINT IF EXISTS nodes_quarantined_by_iff_quarantined, DROP CONSTRAINT IF EXISTS nodes_quarantined_by_format,
    DROP CONSTRAINT IF EXISTS nodes_health_reason_bounded,
    DROP COLUMN IF EXISTS health, DROP COLUMN IF EXISTS health_reason, DROP COLUMN IF EXISTS infra_failures,
    DROP COLUMN IF EXISTS health_since, DROP COLUMN IF EXISTS quarantined_by;

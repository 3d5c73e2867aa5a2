DROP INDEX IF EXISTS nodes_check_due;
ALTER TABLE nodes DROP CONSTRAINT IF EXISTS nodes_check_run_fkey, DROP COLUMN IF EXISTS check_run_id;
DROP INDEX IF EXISTS runs_checks_of_node;
ALTER TABLE runs DROP CONSTRAINT IF EXISTS runs_health_check_names_check_and_node,
    DROP COLUMN IF EXISTS check_name, DROP COLUMN IF EXISTS check_node;

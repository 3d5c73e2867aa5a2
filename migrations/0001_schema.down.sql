BEGIN;
DROP TABLE IF EXISTS run_events, leases, steps, run_roles, runs, nodes;
DROP FUNCTION IF EXISTS run_events_append_only(), runs_settled_with_steps_final(), runs_queued_holds_nothing();
DROP SEQUENCE IF EXISTS lease_epoch;
DROP DOMAIN IF EXISTS mediator_id;
COMMIT;

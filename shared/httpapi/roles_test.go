package httpapi_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"mediator/localdev/apitest"
	"mediator/localdev/testdb"
	"mediator/shared/wire"
)

// The handlers serve as the application role, as every deployed function but migrate logs in:
// every route here, the reaper, and every trigger of the schema (the free-node list, the queue
// counts, the event outbox, the history's append-only guard, the deferred checks) work with
// its grants — as does every other handler test, through the same harness — and it may not
// change the schema, or what guards it, in any way.
func TestTheApplicationRoleServesAndChangesNoSchema(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	app := env.Store.Pool()
	var user string
	var super bool
	if err := app.QueryRow(ctx, `SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &super); err != nil {
		t.Fatal(err)
	}
	if user != testdb.Roles().App || super {
		t.Fatalf("the handlers' store logs in as %s (superuser %t), not as the application role %s", user, super, testdb.Roles().App)
	}

	// The event outbox on: each history row is marked for publishing by its trigger.
	if err := env.Store.SetPublishing(ctx, true); err != nil {
		t.Fatal(err)
	}
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	env.Beat("C", "boot-1", false, "spare")
	for _, id := range []string{"first", "second", "third"} {
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun(id, "board")); resp.Status != 201 && resp.Status != 202 {
			t.Fatalf("submit %s: %s", id, resp)
		}
	}
	if got := getRun(t, env, "third"); got.State != wire.Queued {
		t.Fatalf("third is %s; want it queued behind the two placed", got.State)
	}
	for _, target := range []string{"/healthz", "/v1/queue", "/v1/runs", "/v1/runs/third", "/v1/nodes", "/v1/leases"} {
		if resp := env.Do(apitest.Admin, "GET", target, nil); resp.Status != 200 {
			t.Errorf("GET %s: %s", target, resp)
		}
	}
	if resp := env.Do(apitest.Admin, "POST", "/v1/runs/third/priority", map[string]any{"priority": 90}); resp.Status != 200 {
		t.Fatalf("priority: %s", resp)
	}
	node := getRun(t, env, "first").Assigned["main"]
	env.Finish(node, "boot-1", "first", wire.ReportSucceeded)
	if got := getRun(t, env, "third"); got.State != wire.Running || got.Assigned["main"] != node {
		t.Fatalf("third after first finished on %s: %s on %v", node, got.State, got.Assigned)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/second/cancel", map[string]any{"reason": "enough"}); resp.Status != 200 && resp.Status != 202 {
		t.Fatalf("cancel: %s", resp)
	}
	for _, call := range []struct{ method, target string }{
		{"POST", "/v1/nodes/C/drain"}, {"DELETE", "/v1/nodes/C/drain"}, {"DELETE", "/v1/nodes/C"},
	} {
		if resp := env.Do(apitest.Admin, call.method, call.target, nil); resp.Status != 200 {
			t.Fatalf("%s %s: %s", call.method, call.target, resp)
		}
	}
	if env.Count(`SELECT count(*) FROM run_events_unpublished`) == 0 {
		t.Error("no history row was marked for publishing")
	}
	// The reaper, pruning a run past retention: its history goes too, which only the pruning
	// reaper may delete.
	if err := env.Store.SetPublishing(ctx, false); err != nil {
		t.Fatal(err)
	}
	env.Exec(`UPDATE runs SET finished_at = now() - interval '400 days' WHERE name = 'first'`)
	if sum := env.Reap(); sum.Pruned != 1 {
		t.Fatalf("the reap pruned %d runs, want first", sum.Pruned)
	}
	env.CheckInvariants()

	// What the role may not do: change the schema, its guards, its owner, or who may.
	for _, sql := range []string{
		`CREATE TABLE evil (x int)`,
		`CREATE INDEX evil ON runs (owner)`,
		`CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`CREATE OR REPLACE FUNCTION run_events_append_only() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN OLD; END'`,
		`CREATE SCHEMA evil`,
		`ALTER TABLE runs ADD COLUMN evil int`,
		`ALTER TABLE runs DROP CONSTRAINT runs_state_valid`,
		`ALTER TABLE run_events DISABLE TRIGGER run_events_append_only`,
		`ALTER TABLE runs OWNER TO ` + pgx.Identifier{user}.Sanitize(),
		`ALTER FUNCTION queue_bucket(timestamptz, integer) OWNER TO ` + pgx.Identifier{user}.Sanitize(),
		`ALTER SEQUENCE lease_epoch RESTART`,
		`SELECT setval('lease_epoch', 1)`,
		`DROP TABLE run_events`,
		`DROP TRIGGER run_events_append_only ON run_events`,
		`DROP DOMAIN mediator_id CASCADE`,
		`TRUNCATE runs CASCADE`,
		`UPDATE schema_migrations SET dirty = true`,
		`SET session_replication_role = replica`,
		`CREATE ROLE evil`,
		`ALTER ROLE ` + pgx.Identifier{user}.Sanitize() + ` CREATEROLE`,
		`CREATE DATABASE evil`,
	} {
		_, err := app.Exec(ctx, sql)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("%s, as the application role: %v; want permission denied (42501)", sql, err)
		}
	}
}

package upkeep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/config"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/upkeep"
)

// cfnEndpoint stands in for the pre-signed S3 URL CloudFormation gives a custom resource: it
// records every response PUT to it.
type cfnEndpoint struct {
	*httptest.Server
	got chan map[string]any
}

func newCFNEndpoint(t *testing.T) *cfnEndpoint {
	e := &cfnEndpoint{got: make(chan map[string]any, 4)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var resp map[string]any
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || json.Unmarshal(body, &resp) != nil {
			t.Errorf("CloudFormation got %s %s", r.Method, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e.got <- resp
	}))
	t.Cleanup(e.Close)
	return e
}

// event is a custom resource request as CloudFormation sends it.
func (e *cfnEndpoint) event(kind string) json.RawMessage {
	ev := map[string]any{
		"RequestType":       kind,
		"ServiceToken":      "arn:aws:lambda:eu-west-1:123456789012:function:mediator-MigrateFunction-x",
		"ResponseURL":       e.URL + "/cloudformation-custom-resource-response-euwest1/abc?X-Amz-Signature=1",
		"StackId":           "arn:aws:cloudformation:eu-west-1:123456789012:stack/mediator/1",
		"RequestId":         "req-" + kind,
		"LogicalResourceId": "DatabaseSchema",
		"ResourceType":      "Custom::DatabaseSchema",
		"ResourceProperties": map[string]any{
			"ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:mediator-MigrateFunction-x", "CodeVersion": "7",
		},
	}
	if kind != "Create" {
		ev["PhysicalResourceId"] = upkeep.SchemaResourceID
	}
	if kind == "Update" {
		ev["OldResourceProperties"] = map[string]any{"CodeVersion": "6"}
	}
	b, _ := json.Marshal(ev)
	return b
}

// migrator is the migrate function's view of an empty database: its store, as the migrator,
// and its settings, which name the application role to grant to.
func migrator(t *testing.T) startup.Deps {
	t.Helper()
	st := emptyDatabase(t)
	cfg, err := config.Load(func(name string) string {
		if name == "DATABASE_URL" {
			return "postgres://set-apart.invalid/mediator" // the store is the test's own
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database.AppUser = testdb.Roles().App
	return startup.Deps{Store: st, Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func emptyDatabase(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: testdb.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.MigrateDown(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, store.Settings{}, nil)
	t.Cleanup(st.Close)
	return st
}

// A deploy's Create and Update migrate and answer SUCCESS with the version; Delete keeps the
// schema and answers SUCCESS; the physical id never changes.
func TestMigrationAsACustomResource(t *testing.T) {
	t.Parallel()
	d := migrator(t)
	st := d.Store
	cf := newCFNEndpoint(t)
	handler := upkeep.Migrate(d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a Lambda's deadline
	defer cancel()
	for _, kind := range []string{"Create", "Update", "Delete"} {
		if _, err := handler(ctx, cf.event(kind)); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		resp := <-cf.got
		if resp["Status"] != "SUCCESS" || resp["PhysicalResourceId"] != upkeep.SchemaResourceID ||
			resp["RequestId"] != "req-"+kind || resp["LogicalResourceId"] != "DatabaseSchema" {
			t.Fatalf("%s answered %v", kind, resp)
		}
		if kind != "Delete" && fmt.Sprint(resp["Data"].(map[string]any)["SchemaVersion"]) != fmt.Sprint(migrations.Latest()) {
			t.Fatalf("%s answered %v; want the schema at %d", kind, resp, migrations.Latest())
		}
		if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
			t.Fatalf("after %s the schema is at %d (dirty %t, %v)", kind, v, dirty, err)
		}
	}
	// Invoked directly, it answers the version.
	out, err := handler(ctx, json.RawMessage(`{}`))
	if err != nil || out.(upkeep.Migrated).SchemaVersion != migrations.Latest() {
		t.Fatalf("direct invocation: %v, %v", out, err)
	}
}

// A migration that fails is answered FAILED with a reason, not left for CloudFormation to wait
// an hour on.
func TestAFailedMigrationAnswersFailed(t *testing.T) {
	t.Parallel()
	d := migrator(t)
	st := d.Store
	// A migration that failed half-way leaves the schema dirty, and golang-migrate refuses to go on.
	if _, err := st.Pool().Exec(context.Background(), `TRUNCATE schema_migrations; INSERT INTO schema_migrations VALUES (1, true)`); err != nil {
		t.Fatal(err)
	}
	cf := newCFNEndpoint(t)
	handler := upkeep.Migrate(d)
	if _, err := handler(context.Background(), cf.event("Update")); err != nil {
		t.Fatalf("the handler failed to answer: %v", err)
	}
	if resp := <-cf.got; resp["Status"] != "FAILED" || resp["Reason"] == "" || resp["PhysicalResourceId"] != upkeep.SchemaResourceID {
		t.Fatalf("a dirty schema answered %v", resp)
	}
}

// Rolling back to the previous release runs its migrate function against a schema ahead of it:
// that is success, and the schema is left as it is (the previous code runs on it).
func TestASchemaAheadOfTheBuildIsLeftAlone(t *testing.T) {
	t.Parallel()
	d := migrator(t)
	st := d.Store
	ctx := context.Background()
	if _, err := st.Migrate(ctx, store.AppRole{Name: d.Config.Database.AppUser}); err != nil {
		t.Fatal(err)
	}
	ahead := migrations.Latest() + 1
	if _, err := st.Pool().Exec(ctx, `UPDATE schema_migrations SET version = $1`, ahead); err != nil {
		t.Fatal(err)
	}
	cf := newCFNEndpoint(t)
	if _, err := upkeep.Migrate(d)(ctx, cf.event("Update")); err != nil {
		t.Fatal(err)
	}
	if resp := <-cf.got; resp["Status"] != "SUCCESS" {
		t.Fatalf("a schema ahead of the build answered %v", resp)
	}
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != ahead {
		t.Fatalf("the schema went from %d to %d (dirty %t, %v)", ahead, v, dirty, err)
	}
}

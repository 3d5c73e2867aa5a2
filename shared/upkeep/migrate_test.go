package upkeep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"

	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/config"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/upkeep"
)

// password is the one every test's database URL carries: no answer may repeat it.
const password = "hunter2"

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
		if ct := r.Header.Get("Content-Type"); ct != "" {
			t.Errorf("the answer came with Content-Type %q; the pre-signed URL is signed with none", ct)
		}
		if len(body) > 4096 {
			t.Errorf("the answer is %d bytes; CloudFormation takes at most 4096", len(body))
		}
		e.got <- resp
	}))
	t.Cleanup(e.Close)
	return e
}

// event is a custom resource request as CloudFormation sends it for DatabaseSchema, with the
// physical id CloudFormation holds for the resource (none on a Create).
func (e *cfnEndpoint) event(kind string) json.RawMessage {
	return e.eventFor(kind, upkeep.SchemaResourceID)
}

func (e *cfnEndpoint) eventFor(kind, physicalID string) json.RawMessage {
	props := map[string]any{
		"ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:mediator-MigrateFunction-x", "ServiceTimeout": "600",
		"CodeVersion": "7", "DatabaseSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mediator-db-AbCdEf",
		"DatabaseHost": "mediator-db-proxy.proxy-abc.eu-west-1.rds.amazonaws.com", "DatabaseName": "mediator", "EventBusName": "",
	}
	ev := map[string]any{
		"RequestType":        kind,
		"ServiceToken":       props["ServiceToken"],
		"ResponseURL":        e.URL + "/cloudformation-custom-resource-response-euwest1/abc?X-Amz-Signature=1",
		"StackId":            "arn:aws:cloudformation:eu-west-1:123456789012:stack/mediator/1",
		"RequestId":          "req-" + kind,
		"LogicalResourceId":  "DatabaseSchema",
		"ResourceType":       "Custom::DatabaseSchema",
		"ResourceProperties": props,
	}
	if kind != "Create" {
		ev["PhysicalResourceId"] = physicalID
	}
	if kind == "Update" {
		old := map[string]any{}
		for k, v := range props {
			old[k] = v
		}
		old["CodeVersion"] = "6"
		ev["OldResourceProperties"] = old
	}
	b, _ := json.Marshal(ev)
	return b
}

// answer is the one response CloudFormation got for the event just handled: none, or a second
// one, fails the test. The endpoint records a PUT before it answers it, so by the time the
// handler has returned, every answer it sent is here.
func (e *cfnEndpoint) answer(t *testing.T, kind string) map[string]any {
	t.Helper()
	var resp map[string]any
	select {
	case resp = <-e.got:
	default:
		t.Fatalf("%s: CloudFormation got no answer", kind)
	}
	select {
	case again := <-e.got:
		t.Fatalf("%s: CloudFormation got a second answer %v after %v", kind, again, resp)
	default:
	}
	if resp["RequestId"] != "req-"+kind || resp["LogicalResourceId"] != "DatabaseSchema" ||
		resp["StackId"] != "arn:aws:cloudformation:eu-west-1:123456789012:stack/mediator/1" {
		t.Fatalf("%s answered for another request: %v", kind, resp)
	}
	return resp
}

// handle runs one event through h; a custom resource's handler fails only when it could not
// answer.
func (e *cfnEndpoint) handle(t *testing.T, ctx context.Context, h func(context.Context, json.RawMessage) (any, error), kind string) map[string]any {
	t.Helper()
	if _, err := h(ctx, e.event(kind)); err != nil {
		t.Fatalf("%s: the handler could not answer: %v", kind, err)
	}
	return e.answer(t, kind)
}

// wantFailed checks a FAILED answer for our resource, whose reason says each of says and no
// credential.
func wantFailed(t *testing.T, kind string, resp map[string]any, says ...string) string {
	t.Helper()
	reason, _ := resp["Reason"].(string)
	if resp["Status"] != "FAILED" || resp["PhysicalResourceId"] != upkeep.SchemaResourceID || reason == "" {
		t.Fatalf("%s answered %v; want FAILED with a reason, for %s", kind, resp, upkeep.SchemaResourceID)
	}
	if strings.Contains(reason, password) {
		t.Fatalf("%s: the reason gives the password away: %s", kind, reason)
	}
	t.Logf("%s: FAILED: %s", kind, reason)
	for _, s := range says {
		if !strings.Contains(reason, s) {
			t.Errorf("%s: the reason does not say %q: %s", kind, s, reason)
		}
	}
	return reason
}

func wantSucceeded(t *testing.T, kind string, resp map[string]any, version uint) {
	t.Helper()
	if resp["Status"] != "SUCCESS" || resp["PhysicalResourceId"] != upkeep.SchemaResourceID {
		t.Fatalf("%s answered %v; want SUCCESS for %s", kind, resp, upkeep.SchemaResourceID)
	}
	if kind != "Delete" && fmt.Sprint(resp["Data"].(map[string]any)["SchemaVersion"]) != fmt.Sprint(version) {
		t.Fatalf("%s answered %v; want the schema at %d", kind, resp, version)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// deps is the migrate function's view of a store the test holds: its settings name the
// application role the migration grants to.
func deps(st *store.Store) startup.Deps {
	var cfg config.Config
	cfg.Database.AppUser = testdb.Roles().App
	return startup.Deps{Store: st, Config: cfg, Log: quiet}
}

// opened is a Migrator's Open for a store the test holds.
func opened(st *store.Store) func(context.Context) (startup.Deps, error) {
	return func(context.Context) (startup.Deps, error) { return deps(st), nil }
}

// migratedDatabase is a database of the test's own at migrations.Latest(), its URL carrying
// the password (the test cluster trusts local connections, so it is never checked), and a
// store on it.
func migratedDatabase(t *testing.T) (*store.Store, string) {
	t.Helper()
	u, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	pool, err := store.Connect(context.Background(), store.PoolParams{URL: u.String()})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, store.Settings{}, nil)
	t.Cleanup(st.Close)
	return st, u.String()
}

// emptyDatabase is a database of the test's own with no schema.
func emptyDatabase(t *testing.T) (*store.Store, string) {
	t.Helper()
	st, dbURL := migratedDatabase(t)
	if _, err := store.MigrateDown(context.Background(), st.Pool()); err != nil {
		t.Fatal(err)
	}
	return st, dbURL
}

// settings is an environment the handler reads, which the test may change between events.
type settings struct {
	mu   sync.Mutex
	vars map[string]string
}

func (s *settings) getenv(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.vars[name]; ok || name != "DB_APP_USER" {
		return v
	}
	return testdb.Roles().App // the role the test cluster has
}

func (s *settings) set(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vars[name] = value
}

// migrationLock is golang-migrate's advisory lock on st's database, as its pgx driver takes it.
func migrationLock(t *testing.T, st *store.Store) string {
	t.Helper()
	var db, schema string
	if err := st.Pool().QueryRow(context.Background(), `SELECT current_database(), current_schema()`).Scan(&db, &schema); err != nil {
		t.Fatal(err)
	}
	id, err := database.GenerateAdvisoryLockId(db, schema, "schema_migrations")
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// session is a connection of its own to dbURL, named app in pg_stat_activity.
func session(t *testing.T, dbURL, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func lambdaDeadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a Lambda's deadline
	t.Cleanup(cancel)
	return ctx
}

// A deploy's Create and Update migrate and answer SUCCESS with the version; Delete keeps the
// schema and answers SUCCESS; the physical id never changes.
func TestMigrationAsACustomResource(t *testing.T) {
	t.Parallel()
	st, _ := emptyDatabase(t)
	cf := newCFNEndpoint(t)
	handler := upkeep.Migrate(deps(st))
	ctx := lambdaDeadline(t)
	for _, kind := range []string{"Create", "Update", "Delete"} {
		wantSucceeded(t, kind, cf.handle(t, ctx, handler, kind), migrations.Latest())
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

// A setting the function cannot start with is a FAILED answer naming it, for a Create and an
// Update alike, not an init error CloudFormation would wait an hour on; invoked directly, the
// same error. Once the setting is fixed, the next event opens the store and migrates: a failed
// start is tried again, never kept.
func TestMigrateResourceWithABadSetting(t *testing.T) {
	t.Parallel()
	_, dbURL := migratedDatabase(t)
	env := &settings{vars: map[string]string{"DATABASE_URL": dbURL, "LEASE_TTL_SECONDS": "sixty", "LOG_LEVEL": "error"}}
	handler := upkeep.MigrateFunction(env.getenv).Handle
	cf := newCFNEndpoint(t)
	ctx := lambdaDeadline(t)
	for _, kind := range []string{"Create", "Update"} {
		wantFailed(t, kind, cf.handle(t, ctx, handler, kind), "cannot start", "LEASE_TTL_SECONDS")
	}
	if _, err := handler(ctx, json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "LEASE_TTL_SECONDS") {
		t.Fatalf("invoked directly with a bad setting: %v", err)
	}
	env.set("LEASE_TTL_SECONDS", "60")
	wantSucceeded(t, "Update", cf.handle(t, ctx, handler, "Update"), migrations.Latest())
}

// A database that cannot be reached — nothing listens on its port — is a FAILED answer that
// says so, without the URL's password; Delete needs no database and succeeds.
func TestMigrateResourceWithAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	env := &settings{vars: map[string]string{
		"DATABASE_URL": "postgres://mediator:" + password + "@" + closed + "/mediator?sslmode=disable", "LOG_LEVEL": "error",
	}}
	handler := upkeep.MigrateFunction(env.getenv).Handle
	cf := newCFNEndpoint(t)
	ctx := lambdaDeadline(t)
	for _, kind := range []string{"Create", "Update"} {
		wantFailed(t, kind, cf.handle(t, ctx, handler, kind), "cannot connect to the database")
	}
	wantSucceeded(t, "Delete", cf.handle(t, ctx, handler, "Delete"), 0)
}

// A migration that fails is a FAILED answer naming it and its error; its transaction rolled
// back, the version with it, so the schema is where it was and clean — the serving functions
// start on it, and the next deploy, with the file fixed, migrates.
func TestMigrateResourceWithAFailingMigration(t *testing.T) {
	t.Parallel()
	st, _ := migratedDatabase(t)
	name := testdb.NextMigration("broken")
	next := migrations.Latest() + 1
	cf := newCFNEndpoint(t)
	ctx := lambdaDeadline(t)
	broken := &upkeep.Migrator{Open: opened(st), Migrations: testdb.MigrationsWith(map[string]string{
		name: "CREATE TABLE half_done (x int);\nSELEC 1;\n",
	})}
	wantFailed(t, "Update", cf.handle(t, ctx, broken.Handle, "Update"),
		fmt.Sprintf("migration %d, line 2", next), `syntax error at or near "SELEC"`)
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
		t.Fatalf("after the failed migration the schema is at %d (dirty %t, %v); want %d, clean", v, dirty, err, migrations.Latest())
	}
	var left bool
	if err := st.Pool().QueryRow(ctx, `SELECT to_regclass('half_done') IS NOT NULL`).Scan(&left); err != nil || left {
		t.Fatalf("the failed migration left its first statement behind (%v)", err)
	}
	fixed := &upkeep.Migrator{Open: opened(st), Migrations: testdb.MigrationsWith(map[string]string{
		name: "CREATE TABLE half_done (x int);\n",
	})}
	wantSucceeded(t, "Update", cf.handle(t, ctx, fixed.Handle, "Update"), next)
}

// The schema left dirty by a migrator that marked it so (golang-migrate's own, before this one)
// is a FAILED answer saying so, not a migration on top of it.
func TestMigrateResourceOnADirtySchema(t *testing.T) {
	t.Parallel()
	st, _ := emptyDatabase(t)
	if _, err := st.Pool().Exec(context.Background(), `TRUNCATE schema_migrations; INSERT INTO schema_migrations VALUES (1, true)`); err != nil {
		t.Fatal(err)
	}
	cf := newCFNEndpoint(t)
	wantFailed(t, "Update", cf.handle(t, lambdaDeadline(t), upkeep.Migrate(deps(st)), "Update"),
		"dirty at version 1")
}

// Another migration holding golang-migrate's lock: the migrator waits its lock_timeout for it,
// then answers FAILED naming the lock and who holds it; once it is free, the next deploy
// migrates.
func TestMigrateResourceWhileTheMigrationLockIsHeld(t *testing.T) {
	t.Parallel()
	st, dbURL := migratedDatabase(t)
	lock := migrationLock(t, st)
	other := session(t, dbURL, "another-migration")
	ctx := lambdaDeadline(t)
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1::bigint)`, lock); err != nil {
		t.Fatal(err)
	}
	cf := newCFNEndpoint(t)
	handler := upkeep.Migrate(deps(st))
	wantFailed(t, "Update", cf.handle(t, ctx, handler, "Update"),
		"the migration lock", fmt.Sprintf("held by pid %d (another-migration)", other.PgConn().PID()),
		"canceling statement due to lock timeout")
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1::bigint)`, lock); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, "Update", cf.handle(t, ctx, handler, "Update"), migrations.Latest())
}

// A migration waiting for a table that serving traffic holds gives up at its lock_timeout,
// without stalling that traffic behind it, and answers FAILED naming the table, the lock and
// who holds it. The serving transaction goes on as if nothing happened.
func TestMigrateResourceWaitingBehindServingTraffic(t *testing.T) {
	t.Parallel()
	st, dbURL := migratedDatabase(t)
	ctx := lambdaDeadline(t)
	serving := session(t, dbURL, "mediator-query")
	tx, err := serving.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM runs`); err != nil {
		t.Fatal(err)
	}
	alter := &upkeep.Migrator{Open: opened(st), Migrations: testdb.MigrationsWith(map[string]string{
		testdb.NextMigration("alter_runs"): "ALTER TABLE runs ADD COLUMN waited boolean;\n",
	})}
	cf := newCFNEndpoint(t)
	wantFailed(t, "Update", cf.handle(t, ctx, alter.Handle, "Update"),
		fmt.Sprintf("migration %d", migrations.Latest()+1), "AccessExclusiveLock on runs",
		fmt.Sprintf("held by pid %d (mediator-query)", serving.PgConn().PID()), "canceling statement due to lock timeout")
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the serving transaction, after the migration gave up: %v", err)
	}
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
		t.Fatalf("the schema is at %d (dirty %t, %v); want %d, clean", v, dirty, err, migrations.Latest())
	}
}

// A migration still running as the invocation's deadline nears is given up on AnswerMargin
// before it: its session is ended first — its transaction rolled back, golang-migrate's lock
// released — and then the answer is FAILED saying so. The lock is free the moment the answer
// is in: another session takes it without waiting, and the retry the answer recommends
// migrates at once.
func TestMigrateResourceTimeout(t *testing.T) {
	t.Parallel()
	st, dbURL := migratedDatabase(t)
	slow := &upkeep.Migrator{Open: opened(st), Migrations: testdb.MigrationsWith(map[string]string{
		testdb.NextMigration("slow"): "CREATE TABLE slow_started (x int);\nSELECT pg_sleep(600);\n",
	})}
	// The migration gets one second of the invocation; the rest is the answer's margin.
	ctx, cancel := context.WithTimeout(context.Background(), upkeep.AnswerMargin+time.Second)
	defer cancel()
	cf := newCFNEndpoint(t)
	wantFailed(t, "Update", cf.handle(t, ctx, slow.Handle, "Update"),
		"did not finish in time", "its database session was ended", "released the migration lock", "deploy again")

	other := session(t, dbURL, "another-migration")
	var took bool
	if err := other.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::bigint)`, migrationLock(t, st)).Scan(&took); err != nil || !took {
		t.Fatalf("golang-migrate's lock is still held after the answer (%v)", err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	var sleeping int
	if err := other.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()`).Scan(&sleeping); err != nil || sleeping != 0 {
		t.Fatalf("%d sessions still run the slow migration (%v)", sleeping, err)
	}
	var left bool
	if err := other.QueryRow(ctx, `SELECT to_regclass('slow_started') IS NOT NULL`).Scan(&left); err != nil || left {
		t.Fatalf("the given-up migration's transaction was not rolled back (%v)", err)
	}
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
		t.Fatalf("the schema is at %d (dirty %t, %v); want %d, clean", v, dirty, err, migrations.Latest())
	}
	retry, cancelRetry := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelRetry()
	wantSucceeded(t, "Update", cf.handle(t, retry, upkeep.Migrate(deps(st)), "Update"), migrations.Latest())
}

// Delete answers SUCCESS without reading the configuration or opening anything: a stack whose
// settings broke still rolls back and deletes. It answers the physical id CloudFormation holds,
// whatever it is, and the database is left as it was.
func TestMigrateResourceDeleteWithABrokenSetting(t *testing.T) {
	t.Parallel()
	st, dbURL := emptyDatabase(t)
	var opens int
	env := &settings{vars: map[string]string{"DATABASE_URL": dbURL, "LEASE_TTL_SECONDS": "0"}}
	m := &upkeep.Migrator{Open: func(ctx context.Context) (startup.Deps, error) {
		opens++
		return startup.Open(ctx, "migrate", env.getenv)
	}}
	cf := newCFNEndpoint(t)
	ctx := lambdaDeadline(t)
	for _, id := range []string{upkeep.SchemaResourceID, "mediator-schema-of-an-older-stack"} {
		if _, err := m.Handle(ctx, cf.eventFor("Delete", id)); err != nil {
			t.Fatal(err)
		}
		if resp := cf.answer(t, "Delete"); resp["Status"] != "SUCCESS" || resp["PhysicalResourceId"] != id {
			t.Fatalf("Delete of %s answered %v", id, resp)
		}
	}
	if opens != 0 {
		t.Fatalf("Delete opened the configuration and the store %d times", opens)
	}
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != 0 {
		t.Fatalf("Delete touched the database: the schema is at %d (dirty %t, %v)", v, dirty, err)
	}
}

// A panic inside is a FAILED answer, the one answer the event gets.
func TestMigrateResourcePanic(t *testing.T) {
	t.Parallel()
	m := &upkeep.Migrator{Open: func(context.Context) (startup.Deps, error) { panic("a secret of an unexpected shape") }}
	cf := newCFNEndpoint(t)
	reason := wantFailed(t, "Create", cf.handle(t, lambdaDeadline(t), m.Handle, "Create"), "panicked")
	if strings.Contains(reason, "secret") {
		t.Fatalf("the reason repeats what the panic said: %s", reason)
	}
}

// Rolling back to the previous release runs its migrate function against a schema ahead of it:
// that is success, and the schema is left as it is (the previous code runs on it).
func TestASchemaAheadOfTheBuildIsLeftAlone(t *testing.T) {
	t.Parallel()
	st, _ := migratedDatabase(t)
	ctx := lambdaDeadline(t)
	ahead := migrations.Latest() + 1
	if _, err := st.Pool().Exec(ctx, `UPDATE schema_migrations SET version = $1`, ahead); err != nil {
		t.Fatal(err)
	}
	cf := newCFNEndpoint(t)
	if resp := cf.handle(t, ctx, upkeep.Migrate(deps(st)), "Update"); resp["Status"] != "SUCCESS" {
		t.Fatalf("a schema ahead of the build answered %v", resp)
	}
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != ahead {
		t.Fatalf("the schema went from %d to %d (dirty %t, %v)", ahead, v, dirty, err)
	}
}

package localpg_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/localpg"
	"mediator/localdev/testdb"
	"mediator/shared/store"
)

// freshRoles are role names no other test uses, dropped (with their grants in db) when the
// test ends.
func freshRoles(t *testing.T, adminDB string) localpg.Roles {
	t.Helper()
	suffix := strings.ToLower(rand.Text()[:8])
	r := localpg.Roles{Migrator: "mediator_migrator_" + suffix, App: "mediator_app_" + suffix}
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, adminDB)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		for _, role := range []string{r.App, r.Migrator} {
			ident := pgx.Identifier{role}.Sanitize()
			if _, err := conn.Exec(ctx, "DROP OWNED BY "+ident+"; DROP ROLE "+ident); err != nil && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("drop %s: %v", role, err)
			}
		}
	})
	return r
}

// Parallel test binaries make the cluster's roles at the same moment: every one of them
// succeeds, and the roles are plain logins, nothing more.
func TestEnsureRolesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adminDB := testdb.Admin(testdb.URL(t))
	r := freshRoles(t, adminDB)
	server := &localpg.Server{URL: adminDB}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- server.EnsureRoles(ctx, r) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("ensuring the roles beside others: %v", err)
		}
	}
	conn, err := pgx.Connect(ctx, adminDB)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, role := range []string{r.Migrator, r.App} {
		var login, more bool
		if err := conn.QueryRow(ctx, `SELECT rolcanlogin, rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls
			FROM pg_roles WHERE rolname = $1`, role).Scan(&login, &more); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if !login || more {
			t.Errorf("%s: logs in %t, holds more than a login %t", role, login, more)
		}
	}
}

// A login that may not create roles finds the ones an administrator made, and, where they
// are missing, says what it needs instead of failing on CREATE ROLE.
func TestEnsureRolesWithoutCreateRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	plain := &localpg.Server{URL: testdb.App(url), External: true}
	if err := plain.EnsureRoles(ctx, testdb.Roles()); err != nil {
		t.Errorf("roles made already, ensured by a login without CREATEROLE: %v", err)
	}
	missing := freshRoles(t, testdb.Admin(url))
	err := plain.EnsureRoles(ctx, missing)
	if err == nil || !strings.Contains(err.Error(), "CREATEROLE") || !strings.Contains(err.Error(), missing.App) {
		t.Errorf("missing roles, ensured by a login without CREATEROLE: %v; want what to do, naming them", err)
	}
}

// A database an earlier `make dev` migrated as the superuser is handed to the migrator, which
// then migrates and grants it; and the migrator alone may create in its schema.
func TestPrepareDatabaseHandsAnEarlierSchemaToTheMigrator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	adminDB := testdb.Admin(url)
	admin, err := store.Connect(ctx, store.PoolParams{URL: adminDB})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	roles := testdb.Roles()
	if _, err := store.MigrateDown(ctx, admin); err != nil {
		t.Fatal(err)
	}
	// As before there were roles: the superuser's schema, and PUBLIC's CREATE on it.
	if _, err := admin.Exec(ctx, `DROP TABLE schema_migrations; GRANT CREATE ON SCHEMA public TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, admin, store.AppRole{Name: roles.App}); err == nil {
		t.Fatal("granted a schema the application role may create in")
	}
	if _, err := admin.Exec(ctx, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, admin, store.AppRole{Name: roles.App}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `GRANT CREATE ON SCHEMA public TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	if err := (&localpg.Server{URL: adminDB}).PrepareDatabase(ctx, adminDB, roles); err != nil {
		t.Fatal(err)
	}
	var foreign int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace
		AND relowner <> (SELECT oid FROM pg_roles WHERE rolname = $1)`, roles.Migrator).Scan(&foreign); err != nil || foreign != 0 {
		t.Fatalf("after preparing, %d relations are not the migrator's (%v)", foreign, err)
	}
	migrator, err := store.Connect(ctx, store.PoolParams{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer migrator.Close()
	if _, err := store.Migrate(ctx, migrator, store.AppRole{Name: roles.App}); err != nil {
		t.Fatalf("the migrator migrating the schema handed to it: %v", err)
	}
}

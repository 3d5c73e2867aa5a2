// Package testdb gives every test a database of its own: a fresh clone of a migrated template
// (CREATE DATABASE … TEMPLATE …), so tests run in parallel and never see each other's rows.
// The cluster's two roles (localpg.Roles) are made once, the template is migrated by the
// migrator, and its grants name the application role: so each clone is a deployed database in
// small, which a test reaches as the migrator (URL) or as the application role (App).
//
// It finds PostgreSQL exactly as `make dev` does (localpg): DATABASE_URL, or a cluster started
// from the installed server binaries under .localdev/pg-test. No database is a test failure
// that says how to get one, never a skip.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"mediator/localdev/localpg"
	"mediator/localdev/prerequisites"
	"mediator/migrations"
	"mediator/shared/store"
)

// Settings make the throwaway test cluster fast; durability is not what tests measure.
var clusterSettings = []string{"fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=500"}

var (
	once     sync.Once
	server   *localpg.Server
	roles    localpg.Roles
	template string
	setupErr error
)

// URL creates a fresh, migrated database for this test, drops it when the test ends, and
// returns it as the migrator logs in: the schema's owner, which migrations, fixtures and any
// test's DDL need.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("testdb: no PostgreSQL for the tests: %v\n"+
			"Run the tests with `make test` on a machine with the PostgreSQL server installed "+
			"("+prerequisites.Need("postgresql")+"), or set DATABASE_URL to a server where you may CREATE DATABASE "+
			"and CREATE ROLE (or where the roles exist already: see README.md, Two commands).", setupErr)
	}
	name := "test_" + randomHex(8)
	ctx := context.Background()
	if err := admin(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, template))
		return err
	}); err != nil {
		t.Fatalf("testdb: create the test database: %v", err)
	}
	t.Cleanup(func() {
		_ = admin(context.Background(), func(c *pgx.Conn) error {
			_, err := c.Exec(context.Background(), fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
			return err
		})
	})
	return localpg.As(withDatabase(server.URL, name), roles.Migrator)
}

// App is the test database dbURL (URL's) as the application role logs in: what every serving
// function connects as, which may read and write rows and change no schema.
func App(dbURL string) string { return localpg.As(dbURL, roles.App) }

// Admin is the test database dbURL (URL's) as the cluster's administrative login, for what
// neither role may do: a test that makes another role own something, say.
func Admin(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	return withDatabase(server.URL, strings.TrimPrefix(u.Path, "/"))
}

// Roles are the cluster's roles, once URL has made a database.
func Roles() localpg.Roles { return roles }

func setup() error {
	dir, err := localpg.ClusterDir("test")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err = localpg.Ensure(ctx, localpg.Options{Dir: dir, Settings: clusterSettings})
	if err != nil {
		return err
	}
	if roles, err = localpg.RolesFromEnv(); err != nil {
		return err
	}
	if err := server.EnsureRoles(ctx, roles); err != nil {
		return err
	}
	template, err = ensureTemplate(ctx, "tpl_"+schemaHash())
	return err
}

// ensureTemplate builds the template for the current migrations once per schema: its name
// carries a hash of the migration files, and it is built under a private name and renamed,
// so parallel test binaries never clone a half-migrated template.
func ensureTemplate(ctx context.Context, name string) (string, error) {
	var exists bool
	if err := admin(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists)
	}); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_" + randomHex(4)
	if err := admin(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `CREATE DATABASE `+building)
		return err
	}); err != nil {
		return "", err
	}
	if err := server.PrepareDatabase(ctx, withDatabase(server.URL, building), roles); err != nil {
		return "", err
	}
	pool, err := store.Connect(ctx, store.PoolParams{URL: localpg.As(withDatabase(server.URL, building), roles.Migrator), AppName: "testdb"})
	if err != nil {
		return "", err
	}
	_, err = store.Migrate(ctx, pool, store.AppRole{Name: roles.App})
	pool.Close()
	if err != nil {
		return "", err
	}
	err = admin(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s RENAME TO %s`, building, name))
		return err
	})
	// Another binary won: duplicate_database when its rename had committed before ours began,
	// unique_violation on pg_database's name when the two renames ran at once. Its template is
	// the same schema: take it, or every test of this package fails for losing a race.
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42P04" || pg.Code == "23505") {
		_ = admin(ctx, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+building)
			return err
		})
		return name, nil
	}
	if err != nil {
		return "", err
	}
	// Nobody connects to a template: a connection would make every clone fail.
	return name, admin(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s WITH ALLOW_CONNECTIONS false`, name))
		return err
	})
}

func admin(ctx context.Context, fn func(*pgx.Conn) error) error {
	c, err := pgx.Connect(ctx, server.URL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return fn(c)
}

// schemaHash names what a template holds: the migrations, the roles they are granted to, and
// the grants themselves.
func schemaHash() string {
	h := sha256.New()
	h.Write([]byte(roles.Migrator + "\x00" + roles.App + "\x00"))
	for _, sql := range store.AppGrants(roles.App) {
		h.Write([]byte(sql + "\x00"))
	}
	_ = fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := migrations.FS.ReadFile(p)
		h.Write([]byte(p))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// MigrationsWith is migrations.FS with files added or replaced (name → SQL): a migration of the
// test's own after the real ones — one that fails, one that waits — migrates a database of this
// package, which is at migrations.Latest() already.
func MigrationsWith(files map[string]string) fstest.MapFS {
	out := fstest.MapFS{}
	_ = fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := migrations.FS.ReadFile(p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	for name, sql := range files {
		out[name] = &fstest.MapFile{Data: []byte(sql)}
	}
	return out
}

// NextMigration is the file name of a migration after the real ones: NextMigration("slow") is
// 0014_slow.up.sql when migrations.Latest() is 13.
func NextMigration(name string) string {
	return fmt.Sprintf("%04d_%s.up.sql", migrations.Latest()+1, name)
}

func withDatabase(serverURL, name string) string {
	u, _ := localpg.WithDatabase(serverURL, name) // the server's own URL, always one
	return u
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

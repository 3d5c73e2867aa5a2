package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/store"
)

// A migration runs under the migrator's timeouts, not the serving ones its pool was opened
// with, directly and through RDS Proxy (where nothing is sent at connect): lock_timeout
// MigratorLockTimeout, and a statement timeout that follows the context's deadline, or
// MigratorStatementTimeout with none. The pool's own sessions keep theirs.
// app is the test cluster's application role, which every migration grants to.
func app() store.AppRole { return store.AppRole{Name: testdb.Roles().App} }

func TestMigratorSessionHasItsOwnTimeouts(t *testing.T) {
	t.Parallel()
	for _, viaProxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaProxy=%v", viaProxy), func(t *testing.T) {
			t.Parallel()
			pool, err := store.Connect(context.Background(), store.PoolParams{
				URL: testdb.URL(t), ViaProxy: viaProxy, StatementTimeout: 5 * time.Second, LockTimeout: 500 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			record := `current_setting('lock_timeout'), (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout')`
			first, second := testdb.NextMigration("settings"), fmt.Sprintf("%04d_settings_again.up.sql", migrations.Latest()+2)
			firstSQL := "CREATE TABLE migrator_settings (n, lock_timeout, statement_ms) AS SELECT 1, " + record + ";\n"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := store.MigrateFrom(ctx, pool, testdb.MigrationsWith(map[string]string{first: firstSQL}), app()); err != nil {
				t.Fatal(err)
			}
			if _, err := store.MigrateFrom(context.Background(), pool, testdb.MigrationsWith(map[string]string{
				first: firstSQL, second: "INSERT INTO migrator_settings SELECT 2, " + record + ";\n",
			}), app()); err != nil {
				t.Fatal(err)
			}
			rows, err := pool.Query(context.Background(), `SELECT lock_timeout, statement_ms FROM migrator_settings ORDER BY n`)
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]any
			for rows.Next() {
				var lock string
				var statement int64
				if err := rows.Scan(&lock, &statement); err != nil {
					t.Fatal(err)
				}
				got = append(got, [2]any{lock, statement})
			}
			if rows.Err() != nil || len(got) != 2 {
				t.Fatalf("the migrations recorded %v (%v)", got, rows.Err())
			}
			if got[0][0] != "2s" || got[0][1].(int64) <= time.Minute.Milliseconds() || got[0][1].(int64) > 3*time.Minute.Milliseconds() {
				t.Errorf("under a 2-minute deadline: lock_timeout %v, statement_timeout %v ms", got[0][0], got[0][1])
			}
			if got[1][0] != "2s" || got[1][1].(int64) != store.MigratorStatementTimeout.Milliseconds() {
				t.Errorf("without a deadline: lock_timeout %v, statement_timeout %v ms", got[1][0], got[1][1])
			}
			var lock string
			if err := pool.QueryRow(context.Background(), `SELECT current_setting('lock_timeout')`).Scan(&lock); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{false: "500ms", true: "0"}[viaProxy]; lock != want {
				t.Errorf("the pool's own session has lock_timeout %s; want %s", lock, want)
			}
		})
	}
}

// A migration that fails says which one, the line, and PostgreSQL's error — not the whole file,
// which golang-migrate's errors carry — and leaves the schema at the version before it, clean.
func TestAFailedMigrationSaysWhichAndWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: testdb.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	comment := "-- " + strings.Repeat("a reader's note ", 200) + "\n"
	_, err = store.MigrateFrom(ctx, pool, testdb.MigrationsWith(map[string]string{
		testdb.NextMigration("broken"): comment + "CREATE TABLE half_done (x int);\nSELEC 1;\n",
	}), app())
	want := fmt.Sprintf("store: migration %d, line 3: ERROR: syntax error at or near \"SELEC\" (SQLSTATE 42601)", migrations.Latest()+1)
	if err == nil || err.Error() != want {
		t.Fatalf("the failed migration said %v; want %s", err, want)
	}
	st := store.New(pool, store.Settings{}, nil)
	if v, dirty, err := st.SchemaVersion(ctx); err != nil || dirty || v != migrations.Latest() {
		t.Fatalf("the schema is at %d (dirty %t, %v); want %d, clean", v, dirty, err, migrations.Latest())
	}
}

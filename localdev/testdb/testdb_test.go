package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Test binaries start together on a clean clone and all build the template at once. One whose
// rename runs while another's is still uncommitted must take the other's template, not fail:
// failing, it fails every test of its package.
func TestTemplateRenameRacesAnother(t *testing.T) {
	URL(t) // the server
	ctx := context.Background()
	name := "tpl_race_" + randomHex(4)
	t.Cleanup(func() {
		_ = admin(ctx, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+name)
			return err
		})
	})
	other, err := pgx.Connect(ctx, server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `CREATE DATABASE `+name+`_other`); err != nil {
		t.Fatal(err)
	}
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s_other RENAME TO %s`, name, name)); err != nil {
		t.Fatal(err)
	}
	type built struct {
		name string
		err  error
	}
	done := make(chan built, 1)
	go func() {
		got, err := ensureTemplate(ctx, name)
		done <- built{got, err}
	}()
	// Commit the other rename only once ours waits on it. (Asked on a connection of its own:
	// inside a transaction pg_stat_activity stays as it first was.)
	watch, err := pgx.Connect(ctx, server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	// The deadline and the builder finishing early only turn a rename that never queues into a
	// failure instead of a hang.
	deadline := time.Now().Add(30 * time.Second)
	for waiting := false; !waiting; {
		if err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'ALTER DATABASE % RENAME TO ' || $1::text)`, name).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-done:
			t.Fatalf("the template was built without waiting for the other rename: %q, %v", b.name, b.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("our rename never waited for the other one")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if b := <-done; b.err != nil || b.name != name {
		t.Fatalf("building beside another binary: %q, %v", b.name, b.err)
	}
	var left int
	if err := admin(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE $1 || '\_%'`, name).Scan(&left)
	}); err != nil || left != 0 {
		t.Fatalf("half-built templates left behind: %d (%v)", left, err)
	}
}

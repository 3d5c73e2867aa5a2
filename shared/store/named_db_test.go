package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/testdb"
	"mediator/shared/store"
)

// At the database: a nil value binds NULL, and a missing one fails the call — alone, or the
// whole batch it is queued in, before anything is sent — with an error naming the statement
// and the placeholder.
func TestNamedArgumentsAtTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: testdb.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const sql = `/* test: strict */ SELECT @a::int IS NULL`
	var isNull bool
	if err := pool.QueryRow(ctx, sql, store.Named{"a": nil}).Scan(&isNull); err != nil || !isNull {
		t.Fatalf("a given as nil: %v, NULL %v", err, isNull)
	}
	const want = "statement /* test: strict */ reads @a, which the call does not give"
	if err := pool.QueryRow(ctx, sql, store.Named{"b": nil}).Scan(&isNull); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a not given: %v, want an error saying %q", err, want)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE sent (x int)`); err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO sent VALUES (1)`)
	b.Queue(sql, store.Named{})
	if err := pool.SendBatch(ctx, b).Close(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a not given, in a batch: %v, want an error saying %q", err, want)
	}
	var sent int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sent`).Scan(&sent); err != nil || sent != 0 {
		t.Fatalf("the batch's other statement: %v, %d rows written", err, sent)
	}
}

package store

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// named binds exactly what pgx.NamedArgs binds — the first call and every call after it —
// including past what only looks like a placeholder.
func TestNamedBindsWhatNamedArgsBinds(t *testing.T) {
	t.Parallel()
	statements := []string{
		`/* wake: @not_a_name */ SELECT @b::int, '@quoted', @a, labels @> @b::text[], @a`,
		`SELECT 1`,
		wakePromote.sql,
		submitInsertStmt.sql,
		heartbeatStmt.sql,
		reportWriteStmt.sql,
	}
	args := map[string]any{}
	for _, sql := range statements {
		for _, m := range mentions.FindAllStringSubmatch(sql, -1) {
			args[m[1]] = "value of " + m[1]
		}
	}
	ctx := context.Background()
	for _, sql := range statements {
		wantSQL, wantArgs, err := pgx.NamedArgs(args).RewriteQuery(ctx, nil, sql, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			gotSQL, gotArgs, err := named(args).RewriteQuery(ctx, nil, sql, nil)
			if err != nil || gotSQL != wantSQL || !slices.Equal(gotArgs, wantArgs) {
				t.Fatalf("%.60s…: got %v %v, want %v", sql, gotArgs, err, wantArgs)
			}
		}
	}
}

package store

import (
	"context"
	"errors"
	"slices"
	"strings"
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
		stmt("wake_promote").sql,
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

// A placeholder the call gives no value for is an error at the call, naming the statement and
// every placeholder it lacks; a nil value is a NULL asked for, a value the statement does not
// read is let through, and a name in a comment or a string is no placeholder.
func TestNamedRefusesAMissingArgument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sql := "/* test: strict @in_tag */ SELECT @b::int, '@in_string', @a -- @in_comment\n, @c"
	_, _, err := named{"a": 1}.RewriteQuery(ctx, nil, sql, nil)
	var missing *missingArgumentsError
	if !errors.As(err, &missing) || missing.Statement != "test: strict @in_tag" || !slices.Equal(missing.Missing, []string{"@b", "@c"}) {
		t.Fatalf("a call without b and c: %v", err)
	}
	if want := "store: statement /* test: strict @in_tag */ reads @b, @c, which the call does not give"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	gotSQL, args, err := named{"a": 1, "b": nil, "c": "x", "unread": 2}.RewriteQuery(ctx, nil, sql, nil)
	if err != nil || !slices.Equal(args, []any{nil, 1, "x"}) || strings.Contains(gotSQL, "@b") {
		t.Fatalf("every placeholder given, b as nil: %q %v %v", gotSQL, args, err)
	}
}

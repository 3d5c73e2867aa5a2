package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// named is pgx.NamedArgs with each statement's rewrite remembered. pgx turns @name into $n by
// lexing the whole statement on every call; the wake's and the submit's statements run to
// kilobytes, and that lexing was a seventh of the handlers' CPU. The first call of a statement
// rewrites it once, with pgx's own lexer, and keeps the order of its $n.
//
// It is strict about what a statement reads: a placeholder the call gives no value for is an
// error at the call, naming the statement and every placeholder it lacks, as with
// pgx.StrictNamedArgs. pgx.NamedArgs binds NULL for it, and a NULL compares as neither true
// nor false: a misspelt key would turn "older than @starvation" into "never", without a word.
// A value given as nil is a NULL the call asks for, and binds as one. A value the statement
// does not read is let through, where StrictNamedArgs refuses it: a misspelt key fails all the
// same, as the placeholder it was meant for goes missing; a caller hands a statement and its
// variant one set of values (wake_promote_protected reads less of the head than wake_promote);
// and a statement a Store writes a setting into (bound, store.go) no longer reads it.
type named map[string]any

// with is n with more's values added: a statement's arguments built in parts.
func (n named) with(more named) named {
	for k, v := range more {
		n[k] = v
	}
	return n
}

type rewritten struct {
	sql   string
	order []string // the name bound to $1, $2, ...
	tag   string   // the statement's /* tag */, which the error of a call names
}

var (
	rewrites sync.Map // statement text → rewritten
	// mentions finds every @name in a statement, and some that are not placeholders (in a
	// comment, say): only pgx's lexer decides, this only lists what it may ask for.
	mentions = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)
)

// RewriteQuery implements pgx.QueryRewriter.
func (n named) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, _ []any) (string, []any, error) {
	r, ok := rewrites.Load(sql)
	if !ok {
		rw, err := rewrite(ctx, conn, sql)
		if err != nil {
			return "", nil, err
		}
		r, _ = rewrites.LoadOrStore(sql, rw)
	}
	rw := r.(rewritten)
	args := make([]any, len(rw.order))
	var missing []string
	for i, name := range rw.order {
		v, given := n[name]
		if !given {
			missing = append(missing, "@"+name)
		}
		args[i] = v
	}
	if missing != nil {
		return "", nil, &missingArgumentsError{Statement: rw.tag, Missing: missing}
	}
	return rw.sql, args, nil
}

// missingArgumentsError is a call that gave a statement no value for some of its placeholders:
// a bug in this package, never a client's mistake. A statement sent in a batch fails the whole
// batch, before any of it is sent, so the error names the statement itself.
type missingArgumentsError struct {
	Statement string   // its /* tag */
	Missing   []string // in the order the statement reads them
}

func (e *missingArgumentsError) Error() string {
	return fmt.Sprintf("store: statement /* %s */ reads %s, which the call does not give", e.Statement, strings.Join(e.Missing, ", "))
}

// rewrite has pgx rewrite sql with each name as its own argument, which gives the order: pgx
// numbers only what its lexer takes for a placeholder, so a name mentioned in a comment or a
// string is in the probe but not in the order, and asked of no call.
func rewrite(ctx context.Context, conn *pgx.Conn, sql string) (rewritten, error) {
	probe := pgx.NamedArgs{}
	for _, m := range mentions.FindAllStringSubmatch(sql, -1) {
		probe[m[1]] = m[1]
	}
	newSQL, order, err := probe.RewriteQuery(ctx, conn, sql, nil)
	if err != nil {
		return rewritten{}, err
	}
	rw := rewritten{sql: newSQL, order: make([]string, len(order)), tag: tagOf(sql)}
	for i, o := range order {
		name, ok := o.(string)
		if !ok {
			// pgx took for a placeholder what mentions does not find: the two disagree on what
			// a name is, and a call could no longer be checked against the statement.
			return rewritten{}, fmt.Errorf("store: statement /* %s */: placeholder $%d is not an @name the store can find", rw.tag, i+1)
		}
		rw.order[i] = name
	}
	return rw, nil
}

// tagOf is the /* tag */ a statement opens with (sql.go), or the statement's first line.
func tagOf(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "/* "); ok {
		if tag, _, ok := strings.Cut(rest, " */"); ok {
			return tag
		}
	}
	first, _, _ := strings.Cut(sql, "\n")
	return first
}

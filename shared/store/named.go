package store

import (
	"context"
	"regexp"
	"sync"

	"github.com/jackc/pgx/v5"
)

// named is pgx.NamedArgs with each statement's rewrite remembered. pgx turns @name into $n by
// lexing the whole statement on every call; the wake's and the submit's statements run to
// kilobytes, and that lexing was a seventh of the handlers' CPU. The first call of a statement
// rewrites it once, with pgx's own lexer, and keeps the order of its $n.
type named map[string]any

type rewritten struct {
	sql   string
	order []string // the name bound to $1, $2, ...
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
	for i, name := range rw.order {
		args[i] = n[name]
	}
	return rw.sql, args, nil
}

// rewrite has pgx rewrite sql with each name as its own argument, which gives the order.
func rewrite(ctx context.Context, conn *pgx.Conn, sql string) (rewritten, error) {
	probe := pgx.NamedArgs{}
	for _, m := range mentions.FindAllStringSubmatch(sql, -1) {
		probe[m[1]] = m[1]
	}
	newSQL, order, err := probe.RewriteQuery(ctx, conn, sql, nil)
	if err != nil {
		return rewritten{}, err
	}
	rw := rewritten{sql: newSQL, order: make([]string, len(order))}
	for i, o := range order {
		rw.order[i] = o.(string)
	}
	return rw, nil
}

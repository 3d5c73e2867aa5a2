package pgcount

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Tags is a pgx.QueryTracer and pgx.BatchTracer that records which statements were sent, in
// order, by the /* tag */ each of the store's statements opens with ("wake: start"); a
// statement without one (BEGIN, COMMIT) is recorded as its first word. A test asserts with it
// which statements a call sent, not only how many.
type Tags struct {
	mu   sync.Mutex
	tags []string
}

// Tag is the tag sql opens with.
func Tag(sql string) string {
	sql = strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(sql, "/* "); ok {
		if tag, _, ok := strings.Cut(rest, " */"); ok {
			return tag
		}
	}
	word, _, _ := strings.Cut(sql, " ")
	return strings.ToUpper(strings.TrimRight(word, ";"))
}

func (t *Tags) add(sql string) {
	t.mu.Lock()
	t.tags = append(t.tags, Tag(sql))
	t.mu.Unlock()
}

// TraceQueryStart records one statement.
func (t *Tags) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.add(data.SQL)
	return ctx
}

// TraceQueryEnd does nothing.
func (t *Tags) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records every statement of a pipelined batch.
func (t *Tags) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		t.add(q.SQL)
	}
	return ctx
}

// TraceBatchQuery does nothing.
func (t *Tags) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (t *Tags) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Mark is where the record stands now, for Since.
func (t *Tags) Mark() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.tags)
}

// Since are the tags recorded after mark.
func (t *Tags) Since(mark int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.tags[mark:]...)
}

// Package pgcount counts what a store sends to PostgreSQL: round trips (a statement, once
// prepared, or a whole pipelined batch) and transactions. Benchmarks report it per call;
// nothing is guessed.
package pgcount

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counter is a pgx.QueryTracer and pgx.BatchTracer that counts, in all and per call (see
// Call).
type Counter struct {
	queries atomic.Int64
	txs     atomic.Int64
}

// TraceQueryStart counts one statement, and a transaction for each BEGIN and for each
// statement sent outside one (PostgreSQL runs it as a transaction of its own).
func (c *Counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	var txs int64
	if begins(data.SQL) || conn.PgConn().TxStatus() == 'I' {
		txs = 1
	}
	c.add(ctx, txs)
	return ctx
}

// TraceBatchStart counts a pipelined batch as the one round trip it is, and a transaction
// for each BEGIN queued in it.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var txs int64
	for _, q := range data.Batch.QueuedQueries {
		if begins(q.SQL) {
			txs++
		}
	}
	c.add(ctx, txs)
	return ctx
}

// TraceBatchQuery does nothing.
func (c *Counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (c *Counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *Counter) add(ctx context.Context, txs int64) {
	c.queries.Add(1)
	c.txs.Add(txs)
	if call, ok := ctx.Value(callKey{}).(*Call); ok {
		call.queries.Add(1)
		call.txs.Add(txs)
	}
}

// begins looks at the first word only: statements run to kilobytes, and lowering a whole one
// per statement would cost the benchmark more CPU than some of the statements it counts.
func begins(sql string) bool {
	sql = strings.TrimLeft(sql, " \t\n")
	return len(sql) >= 5 && strings.EqualFold(sql[:5], "begin")
}

type callKey struct{}

// Call counts what one handler call sends, while other calls run at the same time: the
// handler passes its context down to every query, and the tracer finds the Call in it.
type Call struct{ queries, txs atomic.Int64 }

// WithCall returns a context that counts into a new Call.
func WithCall(ctx context.Context) (context.Context, *Call) {
	c := &Call{}
	return context.WithValue(ctx, callKey{}, c), c
}

// Read returns the call's counts.
func (c *Call) Read() Snapshot { return Snapshot{c.queries.Load(), c.txs.Load()} }

// TraceQueryEnd does nothing.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Snapshot is a reading of the counter.
type Snapshot struct {
	Queries int64 // round trips: statements, and pipelined batches as one each
	Txs     int64
}

// Read returns the counts so far.
func (c *Counter) Read() Snapshot { return Snapshot{c.queries.Load(), c.txs.Load()} }

// Since is the difference from an earlier reading.
func (s Snapshot) Since(earlier Snapshot) Snapshot {
	return Snapshot{s.Queries - earlier.Queries, s.Txs - earlier.Txs}
}

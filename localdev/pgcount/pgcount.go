// Package pgcount counts what a store sends to PostgreSQL: statements (each one round trip
// once prepared) and transactions. Benchmarks report it per call; nothing is guessed.
package pgcount

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counter is a pgx.QueryTracer that counts.
type Counter struct {
	queries atomic.Int64
	txs     atomic.Int64
}

// TraceQueryStart counts one statement, and one transaction for each BEGIN.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(data.SQL)), "begin") {
		c.txs.Add(1)
	}
	return ctx
}

// TraceQueryEnd does nothing.
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Snapshot is a reading of the counter.
type Snapshot struct{ Queries, Txs int64 }

// Read returns the counts so far.
func (c *Counter) Read() Snapshot { return Snapshot{c.queries.Load(), c.txs.Load()} }

// Since is the difference from an earlier reading.
func (s Snapshot) Since(earlier Snapshot) Snapshot {
	return Snapshot{s.Queries - earlier.Queries, s.Txs - earlier.Txs}
}

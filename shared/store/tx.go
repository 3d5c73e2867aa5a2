package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The transaction statements, named for the errors they give: a deferred constraint (I2, I3)
// is checked at COMMIT, and its refusal is translated like any other.
var (
	beginStmt    = statement{name: "begin", sql: "begin"}
	commitStmt   = statement{name: "commit", sql: "commit"}
	rollbackStmt = statement{name: "rollback", sql: "rollback"}
)

// txTries bounds the tries of a transaction that lost a race the database resolved.
const txTries = 3

// inTx runs fn in one transaction, commits it, and returns what fn returned.
//
// A deadlock or serialization failure is retried: PostgreSQL rolled the whole transaction
// back, so running fn again from the start is as safe as the first time. fn's result is
// returned rather than left in a variable of the caller's, so a retry cannot keep what a
// rolled-back try had set.
func inTx[T any](ctx context.Context, s *Store, fn func(pgx.Tx) (T, error)) (T, error) {
	var res T
	var err error
	for range txTries {
		res, err = tryTx(ctx, s, fn)
		if !errors.Is(err, ErrRetry) {
			return res, err
		}
	}
	return res, err
}

func tryTx[T any](ctx context.Context, s *Store, fn func(pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return zero, beginStmt.fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, err := fn(tx)
	if err != nil {
		return zero, translate(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, commitStmt.fail(err)
	}
	return res, nil
}

// pipelined is one try of a pipelined transaction, built afresh for each try: read queues the
// statements of the first round trip; write, from what they returned, queues the writes of the
// second (or none, or refuses with an error: then the transaction is rolled back); result is
// the answer once committed.
type pipelined[T any] struct {
	read   func(*pgx.Batch)
	write  func(*pgx.Batch) error
	result func() T
}

// pipelinedTx runs one transaction in two round trips: BEGIN and the reads go in the first,
// the writes and COMMIT in the second (all in one, when there is nothing to read first). Each
// round trip of a transaction is time its row locks are held while the network and the
// scheduler decide; the report path, the busiest writer, held a run's lock across five of them. Retried as inTx is, each try from a fresh attempt().
func pipelinedTx[T any](ctx context.Context, s *Store, attempt func() pipelined[T]) (T, error) {
	var res T
	var err error
	for range txTries {
		res, err = tryPipelined(ctx, s, attempt())
		if !errors.Is(err, ErrRetry) {
			return res, err
		}
	}
	return res, err
}

func tryPipelined[T any](ctx context.Context, s *Store, p pipelined[T]) (T, error) {
	var zero T
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return zero, beginStmt.fail(err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			// Outside a transaction (a failed COMMIT ends it) this is only a warning.
			_, _ = rollbackStmt.exec(context.WithoutCancel(ctx), conn)
		}
	}()
	second := &pgx.Batch{}
	if p.read == nil {
		second.Queue(beginStmt.sql)
	} else {
		first := &pgx.Batch{}
		first.Queue(beginStmt.sql)
		p.read(first)
		if err := conn.SendBatch(ctx, first).Close(); err != nil {
			return zero, orStatement(beginStmt, err)
		}
	}
	if err := p.write(second); err != nil {
		return zero, translate(err)
	}
	second.Queue(commitStmt.sql)
	if err := conn.SendBatch(ctx, second).Close(); err != nil {
		return zero, orStatement(commitStmt, err)
	}
	committed = true
	return p.result(), nil
}

// orStatement names err by st, unless a statement of the batch already named it.
func orStatement(st statement, err error) error {
	var named *StatementError
	if errors.As(err, &named) {
		return err
	}
	return st.fail(err)
}

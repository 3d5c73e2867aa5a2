package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// inTx runs fn in one transaction and commits it. Deferred constraints (I2, I3) are checked
// at COMMIT, so a commit error goes through translate like any other.
//
// A deadlock or serialization failure is retried a few times: PostgreSQL rolled the whole
// transaction back, so running fn again from the start is exactly as safe as the first time.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	var err error
	for range 3 {
		err = s.tryTx(ctx, fn)
		if !errors.Is(err, ErrRetry) {
			return err
		}
	}
	return err
}

func (s *Store) tryTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return translate(err)
	}
	return translate(tx.Commit(ctx))
}

// pipelinedTx runs one transaction in two round trips: BEGIN and the statements read queues
// go in the first; then, from what they returned, the statements write queues and COMMIT go
// in the second. Each round trip of a transaction is time its row locks are held while the
// network and the scheduler decide; the report path, the busiest writer, held a run's lock
// across five of them. write may queue nothing (the report changes nothing) or return an
// error (the report is refused): then the transaction is rolled back.
func (s *Store) pipelinedTx(ctx context.Context, read func(*pgx.Batch), write func(*pgx.Batch) error) error {
	var err error
	for range 3 {
		err = s.tryPipelined(ctx, read, write)
		if !errors.Is(err, ErrRetry) {
			return err
		}
	}
	return err
}

func (s *Store) tryPipelined(ctx context.Context, read func(*pgx.Batch), write func(*pgx.Batch) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return translate(err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			// Outside a transaction (a failed COMMIT ends it) this is only a warning.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
	}()
	first := &pgx.Batch{}
	first.Queue("begin")
	read(first)
	if err := conn.SendBatch(ctx, first).Close(); err != nil {
		return translate(err)
	}
	second := &pgx.Batch{}
	if err := write(second); err != nil {
		return translate(err)
	}
	second.Queue("commit")
	if err := conn.SendBatch(ctx, second).Close(); err != nil {
		return translate(err)
	}
	committed = true
	return nil
}

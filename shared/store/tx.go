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

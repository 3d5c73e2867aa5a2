package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"mediator/localdev/apitest"
	"mediator/shared/store"
)

// A writer that takes a node holds its free_nodes row only when it holds the node's row too:
// a restart holding the node's row makes a promotion or a submit skip the node without touching
// its free_nodes row, so a wake after the restart's commit finds the row free and places on the
// node; held by the skipper to the end of its statement, the row would make that wake skip the
// node as well, and no one would place on it. With no restart, the taker holds both.
func TestATakerHoldsAFreeNodeOnlyWithItsNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	env.Heartbeat("A", "b1", false, "board")
	pool := env.Store.Pool()
	rowHeld := func() bool {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT 1 FROM free_nodes WHERE node_id = 'A' FOR UPDATE NOWAIT`)
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "55P03" {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	for _, restarting := range []bool{true, false} {
		restart, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if restarting {
			if _, err := restart.Exec(ctx, `SELECT 1 FROM nodes WHERE node_id = 'A' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
		}
		taker, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		had, err := store.TakeNodes(ctx, taker, []string{"A"})
		if err != nil {
			t.Fatal(err)
		}
		switch held := rowHeld(); {
		case restarting && (len(had) != 0 || held):
			t.Errorf("with A restarting, the taker holds %v and A's free_nodes row held: %v; want neither", had, held)
		case !restarting && (!slices.Equal(had, []string{"A"}) || !held):
			t.Errorf("with nothing in the way, the taker holds %v and A's free_nodes row held: %v; want both", had, held)
		}
		_ = taker.Rollback(ctx)
		_ = restart.Rollback(ctx)
	}
}

package store_test

import (
	"context"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

// queueWith leaves runs queued beside free nodes, as between a commit that freed nodes and the
// wake after it: the boards (label board) are drained while the runs queue, then come back,
// and no wake runs.
func queueWith(env *apitest.Env, boards int, queued ...wire.NewRun) {
	env.T.Helper()
	for i := range boards {
		env.Heartbeat("board-"+string(rune('a'+i)), "b1", true, "board")
	}
	for _, r := range queued {
		if got := env.Submit(r); got.Run.State != wire.Queued {
			env.T.Fatalf("%s: %s", r.RunID, got.Run.State)
		}
	}
	env.Exec(`UPDATE nodes SET draining = false`)
}

// A submit takes the room the queue leaves: when the free nodes serve every queued run and
// more, a new run is placed at once (201) instead of queueing behind runs that take nothing
// from it; when they do not, it queues (202) and takes nothing an older run could use.
func TestASubmitTakesOnlyTheRoomTheQueueLeaves(t *testing.T) {
	t.Parallel()
	wide := waiting("wide", "board")
	wide.Roles = append(wide.Roles, wire.NewRole{Name: "peer", Needs: []string{"board"}})
	for _, tc := range []struct {
		name   string
		boards int
		queued []wire.NewRun
		want   string
	}{
		{"room for the queue and the new run", 2, []wire.NewRun{apitest.NewRun("old", "board")}, wire.Running},
		{"the queue takes every free node", 2, []wire.NewRun{apitest.NewRun("old-1", "board"), apitest.NewRun("old-2", "board")}, wire.Queued},
		{"a wide run waits for both boards", 2, []wire.NewRun{wide}, wire.Queued},
		{"the queue waits for another kind", 1, []wire.NewRun{waiting("gpu", "gpu")}, wire.Running},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t)
			queueWith(env, tc.boards, tc.queued...)
			if got := env.Submit(apitest.NewRun("new", "board")); got.Run.State != tc.want {
				t.Fatalf("new run: %s, want %s", got.Run.State, tc.want)
			}
			// Whatever the submit did, a wake now places every older run waiting for boards:
			// the new run took nothing from them.
			env.Wake()
			if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'QUEUED' AND run_id <> 'new' AND shape LIKE '%board%'`); n != 0 {
				t.Errorf("%d older runs still wait for boards after the wake", n)
			}
		})
	}
}

// A one-role run whose chosen node another writer is taking at that moment takes a spare
// instead of queueing, so that concurrent submits reaching for one board do not queue all but
// one.
func TestASubmitTakesASpareWhenItsNodeIsBeingTaken(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Heartbeat("B", "b1", false, "board")
	run := apitest.NewRun("r", "board")
	verdict, err := env.Store.DryRun(context.Background(), run)
	if err != nil || verdict.Assigned["main"] == "" {
		t.Fatalf("dry run: %+v %v", verdict, err)
	}
	chosen := verdict.Assigned["main"]
	tx, err := env.Store.Pool().Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// What a concurrent submit or promotion taking the node holds.
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM free_nodes WHERE node_id = $1 FOR UPDATE`, chosen); err != nil {
		t.Fatal(err)
	}
	got := env.Submit(run)
	if got.Run.State != wire.Running || got.Run.Roles["main"].NodeID == chosen || got.Run.Roles["main"].NodeID == "" {
		t.Fatalf("with %s being taken: %s on %q", chosen, got.Run.State, got.Run.Roles["main"].NodeID)
	}
	if n := env.Count(`SELECT count(*) FROM leases WHERE run_id = 'r' AND node_id <> $1`, chosen); n != 1 {
		t.Fatalf("%d leases on the spare", n)
	}
}

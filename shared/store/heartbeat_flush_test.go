package store_test

import (
	"context"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

// Only an idle node's routine heartbeat — nothing written but its advert's times — commits
// without waiting for its WAL flush; a registration, a change of labels or drain, a new boot,
// a lease's renewal (which the agent's guard counts on), a restart that gives up a lease and a
// node back from an expired advert all wait for theirs. And the setting is the transaction's
// alone: the connection's next transaction waits for its flush again.
func TestOnlyARoutineHeartbeatDefersItsFlush(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(1)) // one connection: the next statement uses the same
	// The test cluster commits asynchronously throughout (testdb): the session waits for its
	// flushes, as a deployed one does, so that a setting leaking out of a heartbeat shows.
	if _, err := env.Store.Pool().Exec(context.Background(), `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	beat := func(want bool, what, boot string, draining bool, labels ...string) {
		t.Helper()
		if got := env.Heartbeat("n", boot, draining, labels...).FlushDeferred; got != want {
			t.Fatalf("%s: flush deferred %v, want %v", what, got, want)
		}
		var sync string
		if err := env.Store.Pool().QueryRow(context.Background(), `SHOW synchronous_commit`).Scan(&sync); err != nil || sync != "on" {
			t.Fatalf("after %s, the connection's next transaction has synchronous_commit %q (%v)", what, sync, err)
		}
	}
	renewal := func() { elapse(env, 5*time.Second, true) } // past the renewal slack, not the advert

	beat(false, "the registration", "b1", false, "kind=x")
	renewal()
	beat(true, "an idle node's routine renewal", "b1", false, "kind=x")
	renewal()
	beat(false, "new labels", "b1", false, "kind=x", "usb=1")
	beat(false, "a drain", "b1", true, "kind=x", "usb=1")
	beat(false, "the drain lifted", "b1", false, "kind=x", "usb=1")
	beat(false, "a new boot holding no lease", "b2", false, "kind=x", "usb=1")

	if res := env.Submit(apitest.NewRun("r", "kind=x")); res.Run.State != wire.Running {
		t.Fatalf("r: %s", res.Run.State)
	}
	renewal()
	beat(false, "a routine renewal of a lease", "b2", false, "kind=x", "usb=1")
	beat(true, "a beat within the renewal slack, holding a lease", "b2", false, "kind=x", "usb=1")
	beat(false, "a restart that gives up the lease", "b3", false, "kind=x", "usb=1")

	elapse(env, env.Config.AdvertTTL()+time.Second, true)
	beat(false, "back from an expired advert", "b3", false, "kind=x", "usb=1")
}

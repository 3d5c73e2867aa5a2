package store_test

import (
	"fmt"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/wire"
)

// elapse moves every time the reaper judges by d into the past, as if d had passed without a
// heartbeat from any node — or, with heard, while some nodes (the caller's, who heartbeat next)
// kept heartbeating all along: written, never slept.
func elapse(env *apitest.Env, d time.Duration, heard bool) {
	env.T.Helper()
	iv := fmt.Sprintf("%d milliseconds", d.Milliseconds())
	env.Exec(`UPDATE leases SET expires_at = expires_at - $1::interval`, iv)
	env.Exec(`UPDATE nodes SET last_seen_at = last_seen_at - $1::interval, advert_expires_at = advert_expires_at - $1::interval`, iv)
	env.Exec(`UPDATE heartbeat_pulse SET heard_at = heard_at - $1::interval, quiet_from = quiet_from - $1::interval,
		quiet_until = quiet_until - $1::interval, graced_at = graced_at - $1::interval`, iv)
	env.Exec(`UPDATE runs SET created_at = created_at - $1::interval, started_at = started_at - $1::interval`, iv)
	if heard {
		env.Exec(`UPDATE heartbeat_pulse SET heard_at = now()`)
	}
}

// running puts one run on each node, every node heartbeating.
func running(env *apitest.Env, nodes ...string) {
	env.T.Helper()
	for _, n := range nodes {
		env.Heartbeat(n, "b1", false, "host="+n)
		if res := env.Submit(apitest.NewRun("run-"+n, "host="+n)); res.Run.State != wire.Running {
			env.T.Fatalf("run-%s: %s", n, res.Run.State)
		}
	}
}

func leaseTTL(env *apitest.Env) time.Duration { return env.Config.LeaseTTL }

// The system accepted no heartbeat for longer than a lease (the database was down while the
// nodes kept trying): the first reap after it renews every lease instead of reaping them, and
// says so once; the runs stay RUNNING.
func TestOutageGraceKeepsHealthyRuns(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	running(env, "A", "B", "C")
	elapse(env, leaseTTL(env)+30*time.Second, false)
	sum := env.Reap()
	if sum.OutageGrace != 3 || sum.Expired != 0 {
		t.Fatalf("after an outage longer than a lease: %+v; want 3 leases graced, none reaped", sum)
	}
	for _, n := range []string{"A", "B", "C"} {
		if env.State("run-"+n) != wire.Running {
			t.Fatalf("run-%s is %s", n, env.State("run-"+n))
		}
	}
	if n := env.Count(`SELECT count(*) FROM leases WHERE expires_at > now() + interval '50 seconds'`); n != 3 {
		t.Fatalf("%d leases renewed for a whole TTL, want 3", n)
	}
	// Granted once: a second reap straight after changes nothing.
	if sum := env.Reap(); sum.OutageGrace != 0 {
		t.Fatalf("a second grace for the same outage: %+v", sum)
	}
	// A and B come back; C stays silent. One TTL later C is reaped, A and B run on.
	env.Heartbeat("A", "b1", false, "host=A")
	env.Heartbeat("B", "b1", false, "host=B")
	elapse(env, leaseTTL(env)+time.Second, true)
	env.Heartbeat("A", "b1", false, "host=A")
	env.Heartbeat("B", "b1", false, "host=B")
	sum = env.Reap()
	if sum.OutageGrace != 0 || sum.Expired != 1 || env.State("run-C") != wire.Failed || env.State("run-A") != wire.Running {
		t.Fatalf("one TTL after the grace: %+v, run-C %s, run-A %s", sum, env.State("run-C"), env.State("run-A"))
	}
	env.CheckInvariants()
}

// The outage ended and some nodes heartbeated before the reaper ran: the ones that have not
// come back yet are graced all the same — the silence was the system's — while the ones that
// came back need no grace.
func TestOutageGraceCoversNodesNotBackYet(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	running(env, "A", "B")
	elapse(env, 3*leaseTTL(env), false)
	env.Heartbeat("A", "b1", false, "host=A") // the first heartbeat after the silence
	sum := env.Reap()
	if sum.OutageGrace != 1 || sum.Expired != 0 || env.State("run-B") != wire.Running {
		t.Fatalf("B, not back yet after the outage: %+v, run-B %s", sum, env.State("run-B"))
	}
}

// One node dies in a live fleet: no silence, no grace; it is reaped on time.
func TestOneDeadNodeInALiveFleetIsReapedOnTime(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	running(env, "A", "B")
	elapse(env, leaseTTL(env)+time.Second, true)
	env.Heartbeat("A", "b1", false, "host=A")
	sum := env.Reap()
	if sum.OutageGrace != 0 || sum.Expired != 1 || env.State("run-B") != wire.Failed {
		t.Fatalf("the dead node B: %+v, run-B %s", sum, env.State("run-B"))
	}
}

// A fleet whose only node died looks like an outage at first: it is graced once, and reaped
// one TTL later.
func TestAFleetOfOneDeadNodeIsReapedAfterOneGrace(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	running(env, "A")
	elapse(env, leaseTTL(env)+time.Second, false)
	if sum := env.Reap(); sum.OutageGrace != 1 || sum.Expired != 0 {
		t.Fatalf("first reap: %+v", sum)
	}
	elapse(env, leaseTTL(env)+time.Second, false)
	if sum := env.Reap(); sum.OutageGrace != 0 || sum.Expired != 1 || env.State("run-A") != wire.Failed {
		t.Fatalf("one TTL later: %+v, run-A %s", sum, env.State("run-A"))
	}
}

//go:build linux

package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mediator/localdev/apitest"
	"mediator/shared/client"
	"mediator/shared/config"
	"mediator/shared/push"
)

// pushTTL is a lease whose heartbeats come every 20 s, the default cadence: what push is for.
const pushTTL = 60 * time.Second

// pushBound is how soon after the API's answer an idle agent on push has started a run's step
// (or stopped a cancelled one, its grace aside): the bound the issue sets, where polling at
// the 20 s cadence takes 10 s on average.
const pushBound = time.Second

// beats counts the heartbeats the API gets, per node, at a front of the gateway.
type beats struct{ n map[string]*atomic.Int64 }

func countBeats(nodes ...string) *beats {
	b := &beats{n: map[string]*atomic.Int64{}}
	for _, n := range nodes {
		b.n[n] = &atomic.Int64{}
	}
	return b
}

func (b *beats) front(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if node, ok := strings.CutPrefix(r.URL.Path, "/v1/nodes/"); ok && r.Method == http.MethodPut {
			if c := b.n[node]; c != nil {
				c.Add(1)
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (b *beats) of(node string) int64 { return b.n[node].Load() }

// within polls cond until it holds, failing the test past patience.
func within(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func servePush(t *testing.T, ttl time.Duration, front ...func(http.Handler) http.Handler) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t, apitest.Push(), apitest.Configure(func(c *config.Config) { c.LeaseTTL = ttl }))
	return env, env.Serve(front...)
}

// startPushAgent is an agent logging at debug, so that each hint it acts on shows.
func startPushAgent(t *testing.T, base, node string, labels ...string) *agentProc {
	t.Helper()
	n := startAgent(t, base, node, agentOpts{labels: labels, args: []string{"--log-level", "debug"}})
	n.waitFor("heartbeating")
	n.waitFor("push connected", "topic", push.Topic(node))
	return n
}

// On the 20 s cadence, an idle agent told by push starts a run's step within a second of the
// submit's answer, and a cancel's SIGTERM stops the step's process within a second and the
// grace.
func TestAgentPushPicksUpRunsAndCancelsAtOnce(t *testing.T) {
	t.Parallel()
	_, base := servePush(t, pushTTL)
	n := startPushAgent(t, base, "p-1", "kind=p")
	pidsAt := fifo(t, "pids")
	submitted := time.Now()
	submit(t, base, client.RunRequest{RunID: "r", Needs: []string{"kind=p"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `sleep 1000 & echo $! > "$PIDS"; wait`, "env", map[string]string{"PIDS": pidsAt})}}})
	answered := time.Now()
	started := logTime(t, n.waitFor("step started", "run", "r"))
	if took := started.Sub(answered); took > pushBound {
		t.Fatalf("the step started %v after the submit's answer (%v after it was sent), past %v", took, started.Sub(submitted), pushBound)
	}
	if n.index("hint: heartbeating now") < 0 {
		t.Fatal("the step started without a hint")
	}
	procs := pids(t, fromStep(t, pidsAt))
	if _, err := api(t, base, "dev-client").Cancel(context.Background(), "r", client.CancelRequest{Reason: "enough"}); err != nil {
		t.Fatal(err)
	}
	// The agent's --cancel-grace is 2 s; sleep dies of the SIGTERM at once.
	within(t, "the cancelled step's process gone", pushBound+2*time.Second, func() bool { return gone(procs[0]) })
	n.waitFor("step reported", "run", "r", "status", "cancelled")
}

// A hint is only ever "look now": one for another node, one forged by anyone who can publish
// to the broker, and one with no work behind it cost the node at most a heartbeat each, and
// change nothing it does.
func TestAgentPushHintsChangeNothingButWhenTheNodeLooks(t *testing.T) {
	t.Parallel()
	b := countBeats("p-2")
	env, base := servePush(t, pushTTL, b.front)
	n := startPushAgent(t, base, "p-2", "kind=p")
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(env.Broker.URL()).SetClientID("forger"))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { pub.Disconnect(0) })
	publish := func(topic, payload string) {
		t.Helper()
		if tok := pub.Publish(topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	// The other node's hint goes first, from the same publisher: by the time the forged one
	// to p-2 has been acted on, the other one would have been too.
	start, before := time.Now(), b.of("p-2")
	publish(push.Topic("p-3"), `{"look":"now"}`)
	publish(push.Topic("p-2"), `{"run_id":"forged","steps":[{"step_id":"evil","spec":{"cmd":"touch /tmp/pwned"}}]}`)
	within(t, "the forged hint's heartbeat", 10*time.Second, func() bool { return n.log.Count("hint: heartbeating now") == 1 })
	// A hint from the stack itself for a node with no work.
	env.Deps.Hinter.Hint(context.Background(), "p-2")
	within(t, "the empty hint's heartbeat", 10*time.Second, func() bool { return n.log.Count("hint: heartbeating now") == 2 })
	within(t, "the hints' heartbeats answered", 10*time.Second, func() bool { return b.of("p-2") >= before+2 })
	// At most those two, and what the 20 s cadence added meanwhile.
	if got, cadence := b.of("p-2")-before, int64(time.Since(start)/(pushTTL/3))+1; got > 2+cadence {
		t.Fatalf("%d heartbeats for two hints in %v", got, time.Since(start))
	}
	if n.index("step started") >= 0 || n.index("step reported") >= 0 {
		t.Fatalf("a hint made the agent run something:\n%s", n.log.Text())
	}
}

// With the broker gone mid-test, work still flows at the cadence, and once it is back the
// agent reconnects by itself and push picks runs up again.
func TestAgentPushOutageFallsBackToTheCadence(t *testing.T) {
	t.Parallel()
	env, base := servePush(t, agentTTL) // heartbeats every 3 s: the fallback, kept short
	n := startPushAgent(t, base, "p-4", "kind=p")
	run := func(id string) {
		t.Helper()
		submit(t, base, client.RunRequest{RunID: id, Needs: []string{"kind=p"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "true")}}})
		n.waitFor("step reported", "run", id, "status", "succeeded")
	}
	run("before")
	env.Broker.Stop()
	n.waitFor("push: the connection was lost")
	hints := n.log.Count("hint: heartbeating now")
	run("during")
	if n.log.Count("hint: heartbeating now") != hints {
		t.Fatal("a hint came with the broker down")
	}
	if err := env.Broker.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.waitFor("push connected")
	// The stack's side reconnects too (IoT Core's never goes): only then can a hint reach it.
	within(t, "the data plane back on the broker", 10*time.Second, env.DataPlane.Connected)
	// What came while it was away is looked at on the reconnect: one hint of the agent's own.
	within(t, "the reconnect's own look", 10*time.Second, func() bool { return n.log.Count("hint: heartbeating now") > hints })
	hints = n.log.Count("hint: heartbeating now")
	answered := time.Now()
	submit(t, base, client.RunRequest{RunID: "after", Needs: []string{"kind=p"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "true")}}})
	if started := logTime(t, n.waitFor("step started", "run", "after")); started.Sub(answered) > pushBound {
		t.Fatalf("after the outage the step started %v after the submit", started.Sub(answered))
	}
	if n.log.Count("hint: heartbeating now") == hints {
		t.Fatal("the run after the outage was not pushed")
	}
}

// An idle agent with push on heartbeats at its cadence and no faster: the connection's
// keepalive is the broker's business, not the API's.
func TestAgentPushIdleKeepsTheCadence(t *testing.T) {
	t.Parallel()
	b := countBeats("p-5")
	_, base := servePush(t, 3*time.Second, b.front) // a heartbeat a second
	startPushAgent(t, base, "p-5", "kind=p")
	from, start := b.of("p-5"), time.Now()
	within(t, "four more heartbeats", patience, func() bool { return b.of("p-5") >= from+4 })
	// Four heartbeats are three intervals after the first; a little less for the timer's slack.
	if took := time.Since(start); took < 2700*time.Millisecond {
		t.Fatalf("four heartbeats in %v at one a second", took)
	}
}

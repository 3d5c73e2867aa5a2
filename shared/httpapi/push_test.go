package httpapi_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mediator/localdev/apitest"
	"mediator/shared/push"
)

// hints listens on every node's hint topic of a test's broker.
type hints struct {
	t   *testing.T
	env *apitest.Env
	got chan string
}

func listenHints(t *testing.T, env *apitest.Env) *hints {
	t.Helper()
	h := &hints{t: t, env: env, got: make(chan string, 64)}
	c := paho.NewClient(paho.NewClientOptions().AddBroker(env.Broker.URL()).SetClientID("listener-" + t.Name()))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	tok := c.Subscribe("mediator/nodes/+/hint", 1, func(_ paho.Client, m paho.Message) {
		node := strings.TrimSuffix(strings.TrimPrefix(m.Topic(), "mediator/nodes/"), "/hint")
		h.got <- node
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return h
}

// since is the nodes hinted since the last call: it hints a sentinel through the same data
// plane and takes what came before it, since the one publisher's messages arrive in order.
func (h *hints) since() []string {
	h.t.Helper()
	h.env.Deps.Hinter.Hint(context.Background(), "sentinel")
	var nodes []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-h.got:
			if n == "sentinel" {
				slices.Sort(nodes)
				return nodes
			}
			nodes = append(nodes, n)
		case <-deadline:
			h.t.Fatalf("the sentinel hint never came; got %v", nodes)
		}
	}
}

func (h *hints) expect(what string, want ...string) {
	h.t.Helper()
	if got := h.since(); !slices.Equal(got, want) {
		h.t.Fatalf("%s: hinted %v, want %v", what, got, want)
	}
}

// The handlers hint exactly the nodes whose work their commit changed, after it: a placing
// submit the node placed on, a cancel the run's nodes, a wake the nodes it placed on, a drain
// the drained node, a hold's release its nodes; a routine heartbeat nobody. The heartbeat's
// answer offers the broker and the node's own topic.
func TestHintsFollowTheCommitsThatChangeANodesWork(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Push())
	h := listenHints(t, env)
	resp, _ := env.Beat("A", "boot-1", false, "board")
	var body struct {
		Push *struct{ URL, Topic string } `json:"push"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil || body.Push == nil ||
		body.Push.URL != env.Broker.URL() || body.Push.Topic != push.Topic("A") {
		t.Fatalf("the heartbeat's push: %s", resp.Body)
	}
	env.Beat("B", "boot-1", false, "board")
	h.expect("heartbeats of new nodes (the wake placed nothing)")

	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r1", "board", "s1"))
	onR1 := getRun(t, env, "r1").Assigned["main"]
	h.expect("a placing submit", onR1)
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r2", "board", "s1"))
	onR2 := getRun(t, env, "r2").Assigned["main"]
	h.expect("a second placing submit", onR2)
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("queued", "board", "s1"))
	h.expect("a submit that queued")
	env.Beat(onR1, "boot-1", false, "board")
	h.expect("a routine heartbeat")

	env.Report(onR1, "boot-1", env.Epoch(onR1), "r1", "s1", "started")
	if resp := env.Do(alice, "POST", "/v1/runs/r1/cancel", nil); resp.Status != 202 {
		t.Fatalf("cancel: %s", resp)
	}
	h.expect("a cancel of a running step", onR1)

	// A forced cancel frees r2's node, and the wake places the queued run there: one hint.
	if resp := env.Do(apitest.Admin, "POST", "/v1/runs/r2/cancel", map[string]any{"force": true}); resp.Status != 200 {
		t.Fatalf("force: %s", resp)
	}
	h.expect("a forced cancel whose wake placed the queued run", onR2)
	if got := getRun(t, env, "queued").Assigned["main"]; got != onR2 {
		t.Fatalf("the queued run went to %q", got)
	}

	if resp := env.Do(apitest.Admin, "POST", "/v1/nodes/"+onR1+"/drain", nil); resp.Status != 200 {
		t.Fatalf("drain: %s", resp)
	}
	h.expect("a drain", onR1)

	// A hold placed on a node, then released by its owner: its node hears of both.
	env.Beat("C", "boot-1", false, "lab")
	h.expect("a new node's heartbeat")
	if resp := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "h", "needs": []string{"lab"}, "hold_seconds": 600}); resp.Status != 201 {
		t.Fatalf("hold: %s", resp)
	}
	h.expect("a placed hold", "C")
	if resp := env.Do(alice, "POST", "/v1/runs/h/release", nil); resp.Status != 200 {
		t.Fatalf("release: %s", resp)
	}
	h.expect("a hold's release", "C")
}

// A report that makes a step of another role runnable — its inputs in — hints that role's node,
// which would otherwise wait for its cadence to start it; a report that changes nothing for the
// run's other nodes hints none.
func TestAReportHintsTheRunMateItMadeRunnable(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Push())
	h := listenHints(t, env)
	env.Beat("D", "boot-1", false, "dut")
	env.Beat("H", "boot-1", false, "host")
	h.expect("heartbeats of new nodes")
	run := map[string]any{"run_id": "pair",
		"roles": map[string]any{"dut": map[string]any{"needs": []string{"dut"}}, "host": map[string]any{"needs": []string{"host"}}},
		"steps": []map[string]any{
			{"id": "flash", "role": "dut", "spec": map[string]any{"cmd": "true"}},
			{"id": "test", "role": "host", "after": []string{"flash"}, "spec": map[string]any{"cmd": "true"}}}}
	if resp := env.Do(alice, "POST", "/v1/runs", run); resp.Status != 201 {
		t.Fatalf("pair: %s", resp)
	}
	h.expect("a placing submit", "D", "H")
	env.Report("D", "boot-1", env.Epoch("D"), "pair", "flash", "started")
	h.expect("a started report")
	env.Report("D", "boot-1", env.Epoch("D"), "pair", "flash", "succeeded")
	h.expect("the report that made the host's step runnable", "H")
}

// The reaper's sweep hints as a handler's commit does: the nodes of a run it timed out and of a
// hold whose time was up, and the node its wake then placed a queued run on (one hint, however
// many reasons); a sweep that changed nothing hints nobody.
func TestTheReapersSweepHintsTheNodesItChanged(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Push())
	h := listenHints(t, env)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	env.Beat("C", "boot-1", false, "lab")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("late", "board", "s1"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("busy", "board", "s1"))
	onLate, onBusy := getRun(t, env, "late").Assigned["main"], getRun(t, env, "busy").Assigned["main"]
	if resp := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "h", "needs": []string{"lab"}, "hold_seconds": 600}); resp.Status != 201 {
		t.Fatalf("hold: %s", resp)
	}
	queued := oneNodeRun("next", "board", "s1")
	queued["wait_for_capacity"] = true
	env.Do(alice, "POST", "/v1/runs", queued)
	placed := []string{onLate, onBusy, "C"}
	slices.Sort(placed)
	h.expect("the placing submits and the hold", placed...)
	env.Report(onLate, "boot-1", env.Epoch(onLate), "late", "s1", "started")
	h.expect("a report that changed no one else's work")

	if sum := env.Reap(); sum.TimedOut != 0 || sum.HoldsEnded != 0 {
		t.Fatalf("a reap with nothing due: %+v", sum)
	}
	h.expect("a sweep that changed nothing")

	env.Exec(`UPDATE runs SET deadline_at = now() - interval '1 second' WHERE run_id = 'late'`)
	env.Exec(`UPDATE runs SET hold_ends_at = now() - interval '1 second' WHERE run_id = 'h'`)
	if sum := env.Reap(); sum.TimedOut != 1 || sum.HoldsEnded != 1 || sum.Promoted != 1 {
		t.Fatalf("the reap: %+v", sum)
	}
	if got := getRun(t, env, "next").Assigned["main"]; got != onLate {
		t.Fatalf("the queued run went to %q, not the timed-out run's %s", got, onLate)
	}
	swept := []string{onLate, "C"}
	slices.Sort(swept)
	h.expect("the sweep: a timeout (its node placed again by the wake) and a hold's end", swept...)
}

// A run that loses one node loses them all: its run-mates' nodes are told to look now, whether
// the loss was a lease the reaper found expired, a restart's heartbeat or an admin's removal.
func TestLosingANodeHintsItsRunMates(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Push())
	h := listenHints(t, env)
	env.Beat("D", "b1", false, "dut")
	env.Beat("H", "b1", false, "host")
	pair := func(id string) {
		t.Helper()
		run := pairRun(id)
		run["max_attempts"] = 1
		if resp := env.Do(alice, "POST", "/v1/runs", run); resp.Status != 201 {
			t.Fatalf("%s: %s", id, resp)
		}
		h.expect("a pair placed", "D", "H")
	}

	pair("expired")
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'D'`)
	if sum := env.Reap(); sum.Expired != 1 {
		t.Fatalf("the reap: %+v", sum)
	}
	h.expect("D's lease expired", "H")

	env.Beat("D", "b1", false, "dut") // back after its lease expired
	h.expect("D's heartbeat after its loss")
	pair("restarted")
	env.Beat("D", "b2", false, "dut")
	h.expect("D restarted", "H")

	pair("removed")
	if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/D", nil); resp.Status != 200 {
		t.Fatalf("remove: %s", resp)
	}
	h.expect("D removed", "H")
}

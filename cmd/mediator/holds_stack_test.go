//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// A hold from the command line, against the real handlers and a real agent: placed, it keeps
// its node from a run that then queues; it is listed, extended and released, and the run that
// waited is served; a hold no node could serve is refused.
func TestAHoldFromTheCommandLine(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "hx-1", agentOpts{labels: []string{"kind=hx"}})
	n.waitFor("heartbeating")

	expect(t, mediator(t, base, "", "hold", "--needs", "kind=hx", "--for", "1h", "--id", "desk", "--wait"), 0,
		"hold desk: RUNNING until", "(in 1h)", "main → hx-1")
	held := getRun(t, base, "desk").Run
	if held.Kind != client.KindHold || held.HoldSeconds == nil || *held.HoldSeconds != 3600 || held.HoldEndsAt == nil {
		t.Fatalf("the hold as the API has it: %+v", held)
	}
	run := client.RunRequest{RunID: "after-hold", Needs: []string{"kind=hx"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}}
	if s := submit(t, base, run); !s.Queued() {
		t.Fatalf("a run on a held node: %d, want 202", s.Status)
	}
	expect(t, mediator(t, base, "", "holds"), 0, "RUN", "UNTIL", "desk", "RUNNING", "main=hx-1")
	expect(t, mediator(t, base, "", "runs", "--kind", "hold"), 0, "desk", "hold")
	expect(t, mediator(t, base, "", "run", "desk"), 0, "run desk (hold): RUNNING", "hold of 1h · until")

	expect(t, mediator(t, base, "", "extend", "desk", "30m"), 0, "hold desk: RUNNING until")
	extended := getRun(t, base, "desk").Run
	if moved := extended.HoldEndsAt.Sub(*held.HoldEndsAt); moved < 30*time.Minute-time.Second || moved > 30*time.Minute+time.Second {
		t.Fatalf("extend 30m moved the end by %s", moved)
	}

	expect(t, mediator(t, base, "", "release", "desk"), 0, "hold desk: SUCCEEDED")
	n.waitFor("step reported", "run", "after-hold", "status", "succeeded")
	expect(t, mediator(t, base, "", "holds"), 0, "no holds")
	expect(t, mediator(t, base, "", "release", "desk"), 3, "409", "run_not_live")
	expect(t, mediator(t, base, "", "extend", "desk", "1m"), 3, "409", "run_not_live")
	expect(t, mediator(t, base, "", "release", "after-hold"), 3, "409", "not_a_hold")
	expect(t, mediator(t, base, "", "release", "no-such-hold"), 3, "404")

	expect(t, mediator(t, base, "", "hold", "--needs", "nothing=here", "--for", "1h", "--wait"), 1,
		"run_id ", "refused (422)", "role main needs nothing=here")
}

// A hold on a node another hold has queues; mediator hold --wait waits until it is placed,
// and says until when, once the first is released. Extending it while it waits lengthens it.
func TestAQueuedHoldWaitsForItsNode(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "hy-1", agentOpts{labels: []string{"kind=hy"}})
	n.waitFor("heartbeating")
	expect(t, mediator(t, base, "", "hold", "--node", "hy-1", "--for", "1h", "--id", "first"), 0, "hold first: RUNNING until", "main → hy-1")

	wait := start(t, base, "hold", "--node", "hy-1", "--for", "10m", "--id", "second", "--wait")
	c := api(t, base, "dev-client")
	deadline := time.Now().Add(patience)
	for { // until the background hold has queued
		d, err := c.GetRun(context.Background(), "second")
		if err == nil && d.Run.State == wire.Queued {
			break
		}
		if !client.HasCode(err, client.CodeNotFound) && err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the second hold never queued")
		}
		time.Sleep(50 * time.Millisecond)
	}
	expect(t, mediator(t, base, "", "holds"), 0, "first", "RUNNING", "second", "QUEUED", "queued · 0 ahead in the queue · for 10m")
	expect(t, mediator(t, base, "", "extend", "second", "5m"), 0, "hold second: QUEUED at queue position 0, for 15m once placed")
	expect(t, mediator(t, base, "", "release", "first"), 0, "hold first: SUCCEEDED")
	expect(t, wait(), 0, "hold second: QUEUED", "hold second: RUNNING until", "main → hy-1")
	if r := getRun(t, base, "second").Run; r.HoldSeconds == nil || *r.HoldSeconds != 900 || r.HoldEndsAt == nil || r.StartedAt == nil ||
		r.HoldEndsAt.Sub(*r.StartedAt).Round(time.Second) != 15*time.Minute {
		t.Fatalf("the second hold, extended while queued: %+v", r)
	}
	expect(t, mediator(t, base, "", "release", "second"), 0, "hold second: SUCCEEDED")
}

// A run that keeps its failed boards: the step fails on the real agent, which keeps the step's
// directory — what the step left in its work dir included — while the debug hold lasts, says
// where in its log, and removes it once the hold is released.
func TestAFailedStepsDirectoryIsKeptWithItsBoard(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	work := t.TempDir()
	n := startAgent(t, base, "kf-1", agentOpts{labels: []string{"kind=kf"}, work: work})
	n.waitFor("heartbeating")
	keep := 600
	submit(t, base, client.RunRequest{RunID: "kf", Needs: []string{"kind=kf"}, KeepOnFailureSeconds: &keep,
		Steps: []client.StepRequest{{ID: "flash", Spec: spec("cmd", "echo the board said no > evidence.txt; exit 1")}}})
	n.waitFor("step reported", "run", "kf", "status", "failed")
	said := n.waitFor("the failed step's directory is kept for the debug hold", "run", "kf")
	dir, _ := said["dir"].(string)
	hold, _ := said["hold"].(string)
	if got, err := os.ReadFile(filepath.Join(dir, "work", "evidence.txt")); err != nil || string(got) != "the board said no\n" {
		t.Fatalf("the kept directory %s: %q, %v", dir, got, err)
	}
	if r := getRun(t, base, "kf").Run; r.DebugHold == nil || *r.DebugHold != hold {
		t.Fatalf("the failed run names its debug hold %v, the agent %q", r.DebugHold, hold)
	}
	expect(t, mediator(t, base, "", "release", hold), 0, "SUCCEEDED")
	n.waitFor("a kept step directory removed: its debug hold ended", "dir", dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the kept directory is still there after the hold ended: %v", err)
	}
}

// A held board's agent is killed and started again, as a person rebooting the board would: the
// hold goes on under the new boot (a new epoch), the board stays held and its agents ran
// nothing; once released, the queued run is the next agent's.
func TestAHoldOutlivesItsAgentsRestart(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	work := t.TempDir()
	first := startAgent(t, base, "hr-1", agentOpts{labels: []string{"kind=hr"}, work: work})
	first.waitFor("heartbeating")
	expect(t, mediator(t, base, "", "hold", "--needs", "kind=hr", "--for", "1h", "--id", "hr", "--wait"), 0, "hr-1")
	before := first.waitFor("lease taken", "run", "hr")
	submit(t, base, client.RunRequest{RunID: "after-hr", Needs: []string{"kind=hr"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}})
	first.signal(syscall.SIGKILL)
	first.wait()
	second := startAgent(t, base, "hr-1", agentOpts{labels: []string{"kind=hr"}, work: work})
	after := second.waitFor("lease taken", "run", "hr")
	if fmt.Sprint(after["epoch"]) == fmt.Sprint(before["epoch"]) {
		t.Fatalf("the hold's lease under the new boot kept epoch %v", after["epoch"])
	}
	if r := getRun(t, base, "hr").Run; r.State != wire.Running {
		t.Fatalf("the hold after its board's restart: %s", r.State)
	}
	if r := getRun(t, base, "after-hr").Run; r.State != wire.Queued {
		t.Fatalf("the queued run after the held board's restart: %s", r.State)
	}
	expect(t, mediator(t, base, "", "release", "hr"), 0, "SUCCEEDED")
	second.waitFor("step reported", "run", "after-hr", "status", "succeeded")
	if first.index("step started") >= 0 || second.index("step started") < second.index("lease taken", "run", "after-hr") {
		t.Fatal("an agent ran a step while the board was held")
	}
}

// An agent's SIGTERM drain waits for the hold its board is under, as for a step: it exits 0 once
// the hold is released. A second signal exits at once.
func TestAnAgentsDrainWaitsForTheHold(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	for _, second := range []bool{false, true} {
		node := fmt.Sprintf("hd-%v", second)
		n := startAgent(t, base, node, agentOpts{labels: []string{"kind=" + node}})
		n.waitFor("heartbeating")
		expect(t, mediator(t, base, "", "hold", "--needs", "kind="+node, "--for", "1h", "--id", node, "--wait"), 0, node)
		n.waitFor("lease taken", "run", node)
		n.signal(syscall.SIGTERM)
		n.waitFor("drain in effect: the node takes no new work")
		if !n.running() {
			t.Fatalf("%s: the agent exited on SIGTERM while its board was held", node)
		}
		if second {
			n.signal(syscall.SIGTERM)
			if code := n.wait(); code == 0 {
				t.Fatalf("%s: a second signal exited 0", node)
			}
			continue
		}
		expect(t, mediator(t, base, "", "release", node), 0, "SUCCEEDED")
		if code := n.wait(); code != 0 {
			t.Fatalf("%s: after the hold's release the drain exited %d, want 0", node, code)
		}
	}
}

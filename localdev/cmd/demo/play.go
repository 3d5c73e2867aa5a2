package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"mediator/shared/client"
)

// adminToken is the development admin: it reads the fleet, and drains and undrains a node.
const adminToken = "dev-admin"

// play is the demo's script: the client's side through api, the fleet's through real
// `mediator agent` processes of bin, each working under dir/<node>.
type play struct {
	api    *api
	admin  *client.Client
	base   string
	bin    string
	dir    string
	out    *printer
	n      int                   // the number of the last line printed
	nodes  map[string]*agentProc // each node's agent as it now runs
	agents []*agentProc          // every agent process started, to stop them all
}

// newPlay prepares the play against the API at base; nothing starts until perform.
func newPlay(base, bin, dir string, out io.Writer) (*play, error) {
	c, err := client.New(base, client.WithToken(clientToken), client.WithUserAgent("mediator-demo"))
	if err != nil {
		return nil, err
	}
	admin, err := client.New(base, client.WithToken(adminToken), client.WithUserAgent("mediator-demo"))
	if err != nil {
		return nil, err
	}
	return &play{api: &api{c}, admin: admin, base: base, bin: bin, dir: dir, out: &printer{w: out},
		nodes: map[string]*agentProc{}}, nil
}

// perform plays every act, stopping at the first surprise. The caller stops the agents.
func (p *play) perform(ctx context.Context) error {
	for _, act := range []func(context.Context) error{p.gate, p.restart, p.roles} {
		if err := act(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stop ends every agent process still running, and what their steps still run.
func (p *play) stop() {
	for _, a := range p.agents {
		a.stop()
	}
}

// say prints the next numbered line.
func (p *play) say(format string, args ...any) {
	p.n++
	p.out.println(fmt.Sprintf("%d. %s", p.n, fmt.Sprintf(format, args...)))
}

// narrate prints a line under the numbered ones, indented.
func (p *play) narrate(s string) { p.out.println("     " + s) }

// expect prints "what -> got" as the next line when got is what was wanted, and otherwise
// fails the gate saying both.
func (p *play) expect(what, want, got string) error {
	if got != want {
		return fmt.Errorf("step %d, %s: expected %q, got %q", p.n+1, what, want, got)
	}
	p.say("%s -> %s", what, got)
	return nil
}

// stepErr says which step a failure of a call or a wait belongs to.
func (p *play) stepErr(what string, err error) error {
	return fmt.Errorf("step %d, %s: %w", p.n+1, what, err)
}

// startAgent starts the node's agent (on the node's work dir, where a previous boot of it
// worked), waits until its first heartbeat is answered, and expects the fleet to show it
// idle.
func (p *play) startAgent(ctx context.Context, what, node string, labels ...string) error {
	a, err := startAgent(p.bin, p.base, node, filepath.Join(p.dir, node), labels, p.narrate)
	if err != nil {
		return p.stepErr(what, err)
	}
	p.agents = append(p.agents, a)
	p.nodes[node] = a
	if _, err := a.waitFor(ctx, "heartbeating"); err != nil {
		return p.stepErr(what, err)
	}
	// Then it subscribes to its hints: a run placed on it from now on starts at once.
	if _, err := a.waitFor(ctx, "push connected"); err != nil {
		return p.stepErr(what, err)
	}
	fleet, err := p.admin.ListNodes(ctx)
	if err != nil {
		return p.stepErr(what, err)
	}
	state := "not in the fleet"
	for _, n := range fleet.Nodes {
		if n.NodeID == node {
			state = n.State
		}
	}
	return p.expect(what, "200 idle", fmt.Sprintf("%d %s", fleet.Status, state))
}

// reported waits until node's agent has reported runID's step stepID, and reads the run.
func (p *play) reported(ctx context.Context, what, node, runID, stepID string) (*client.RunDetail, error) {
	if _, err := p.nodes[node].waitFor(ctx, "step reported", "run", runID, "step", stepID); err != nil {
		return nil, p.stepErr(what, err)
	}
	r, err := p.api.GetRun(ctx, runID)
	if err != nil {
		return nil, p.stepErr(what, err)
	}
	return r, nil
}

// gate is the core of the contract: placement, queueing, promotion when a node frees, and an
// at-once refusal of what no node of the fleet could ever serve.
func (p *play) gate(ctx context.Context) error {
	p.out.println("Act 1: placed, queued, promoted, refused")
	if err := p.startAgent(ctx, "start rpi-A's agent (board=rpi4); the fleet shows it", "rpi-A", "board=rpi4"); err != nil {
		return err
	}
	submitted := time.Now()
	if err := p.submit(ctx, "submit a (needs board=rpi4, step test: sleep 2)", "201 RUNNING on rpi-A",
		oneStep("a", "test", "sleep 2", 0)); err != nil {
		return err
	}
	rec, err := p.nodes["rpi-A"].waitFor(ctx, "step started", "run", "a")
	if err != nil {
		return p.stepErr("rpi-A starts a/test", err)
	}
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"])); err == nil {
		p.narrate(fmt.Sprintf("rpi-A started a/test %d ms after the submit: the handler's hint woke its agent (its next heartbeat was up to %s away)",
			at.Sub(submitted).Milliseconds(), leaseTTL/3))
	}
	// b's step takes a second so that b is seen RUNNING on rpi-A before it is done.
	if err := p.submit(ctx, "submit b (needs board=rpi4, step test: sleep 1)", "202 QUEUED (queue position 0)",
		oneStep("b", "test", "sleep 1", 0)); err != nil {
		return err
	}
	b, err := p.api.GetRun(ctx, "b")
	if err != nil {
		return p.stepErr("status b", err)
	}
	if err := p.expect("status b", "200 QUEUED (queue position 0)", status(b.Status, b.Run)); err != nil {
		return err
	}

	// a's report settles it, frees rpi-A and promotes b onto it before it is answered.
	a, err := p.reported(ctx, "a finishes on rpi-A", "rpi-A", "a", "test")
	if err != nil {
		return err
	}
	if b, err = p.api.GetRun(ctx, "b"); err != nil {
		return p.stepErr("a finishes on rpi-A", err)
	}
	if err := p.expect("a finishes on rpi-A", "a SUCCEEDED; b RUNNING on rpi-A", "a "+describe(a.Run)+"; b "+describe(b.Run)); err != nil {
		return err
	}

	c, err := p.api.Submit(ctx, client.RunRequest{RunID: "c", Needs: []string{"gpu"},
		Steps: []client.StepRequest{{ID: "train", Spec: map[string]any{"cmd": "python train.py"}}}})
	if err != nil {
		return p.stepErr("submit c (needs gpu)", err)
	}
	if err := p.expect("submit c (needs gpu)", "422 FAILED no_capable_node (unmet: gpu)", status(c.Status, c.Run)+unmet(c.Unmet)); err != nil {
		return err
	}

	if b, err = p.reported(ctx, "b finishes on rpi-A", "rpi-A", "b", "test"); err != nil {
		return err
	}
	return p.expect("b finishes on rpi-A", "b SUCCEEDED", "b "+describe(b.Run))
}

// restart is the second act: a run whose node's agent dies mid-step and comes back (a new
// boot id) goes back to the queue as its next attempt, is placed again, and finishes.
func (p *play) restart(ctx context.Context) error {
	p.out.println("\nAct 2: a run survives its node restarting")
	if err := p.submit(ctx, "submit d (needs board=rpi4, step flash: sleep 3, max_attempts 2)", "201 RUNNING on rpi-A (attempt 1 of 2)",
		oneStep("d", "flash", "sleep 3", 2)); err != nil {
		return err
	}
	// The agent logs a step started once the API took its "started" report.
	if _, err := p.nodes["rpi-A"].waitFor(ctx, "step started", "run", "d"); err != nil {
		return p.stepErr("rpi-A starts d/flash", err)
	}
	d, err := p.api.GetRun(ctx, "d")
	if err != nil {
		return p.stepErr("rpi-A starts d/flash", err)
	}
	if err := p.expect("rpi-A starts d/flash", "d RUNNING on rpi-A, step flash RUNNING"+attemptOf(1, 2),
		"d "+describe(d.Run)+", step flash "+stepState(d.Run, "flash")+attempt(d.Run)); err != nil {
		return err
	}

	// Said before it happens: the agents narrate the kill and the new boot under this line.
	old := p.nodes["rpi-A"]
	p.say("SIGKILL rpi-A's agent mid-step (boot %s), start a new one on the same work dir", old.boot())
	old.kill()
	a, err := startAgent(p.bin, p.base, "rpi-A", old.work, []string{"board=rpi4"}, p.narrate)
	if err != nil {
		return p.stepErr("Mediator sees the new boot_id", err)
	}
	p.agents = append(p.agents, a)
	p.nodes["rpi-A"] = a

	// The wake after the new boot's first heartbeat may already have placed d again: both are
	// right.
	d, err = p.api.await(ctx, "d", "attempt 2", func(r client.Run) bool { return r.Attempt == 2 })
	if err != nil {
		return p.stepErr("Mediator sees the new boot_id", err)
	}
	if err := p.expect("Mediator sees the new boot_id", "d lost rpi-A (node_restarted) and went back to QUEUED as attempt 2",
		fmt.Sprintf("%s as attempt %d", lostNode(d.History), d.Run.Attempt)); err != nil {
		return err
	}
	p.history(d.History)

	if d, err = p.reported(ctx, "d finishes on rpi-A", "rpi-A", "d", "flash"); err != nil {
		return err
	}
	if err := p.expect("d finishes on rpi-A", "d SUCCEEDED"+attemptOf(2, 2), "d "+describe(d.Run)+attempt(d.Run)); err != nil {
		return err
	}
	return p.expect("history of d", "submitted, node_lost, promoted, settled", kinds(d.History))
}

// roles is the third act: a run of two roles on two nodes whose steps talk through outputs;
// an admin's drain that keeps work off a node whose agent runs on; and SIGTERM draining every
// agent to a clean exit.
func (p *play) roles(ctx context.Context) error {
	p.out.println("\nAct 3: two roles that talk, an admin's drain, agents drained by SIGTERM")
	if err := p.startAgent(ctx, "start host-B's agent (host); the fleet shows it", "host-B", "host"); err != nil {
		return err
	}
	pair := client.RunRequest{
		RunID: "pair",
		Roles: map[string]client.RoleRequest{"dut": {Needs: []string{"board=rpi4"}}, "host": {Needs: []string{"host"}}},
		Steps: []client.StepRequest{
			{ID: "boot", Role: "dut", Spec: map[string]any{"cmd": `echo ip=10.0.0.7 >> "$MEDIATOR_OUTPUTS"`}},
			{ID: "check", Role: "host", After: []string{"boot"}, Spec: map[string]any{"cmd": `test "$MEDIATOR_INPUT_BOOT_IP" = 10.0.0.7 && ` +
				`test "$MEDIATOR_NODE_DUT" = rpi-A && echo "dut $MEDIATOR_NODE_DUT at $MEDIATOR_INPUT_BOOT_IP"`}},
		},
	}
	if err := p.submit(ctx, "submit pair (dut: board=rpi4, host: host; check after boot)", "201 RUNNING on dut=rpi-A, host=host-B", pair); err != nil {
		return err
	}
	r, err := p.reported(ctx, "host-B checks what rpi-A's boot gave", "host-B", "pair", "check")
	if err != nil {
		return err
	}
	if err := p.expect("host-B checks what rpi-A's boot gave", "pair SUCCEEDED", "pair "+describe(r.Run)); err != nil {
		return err
	}
	if err := p.expect("GET /v1/runs/pair: boot's outputs, check's output", `200 ip=10.0.0.7; "dut rpi-A at 10.0.0.7"`,
		fmt.Sprintf("%d %s; %q", r.Status, outputs(r.Run, "boot"), message(r.Run, "check"))); err != nil {
		return err
	}

	drained, err := p.admin.Drain(ctx, "rpi-A")
	if err != nil {
		return p.stepErr("admin drains rpi-A", err)
	}
	if err := p.expect("admin drains rpi-A", "200 draining", fmt.Sprintf("%d %s", drained.Status, drained.Node.State)); err != nil {
		return err
	}
	// The agent hears of it at its next heartbeat, and keeps running.
	if _, err := p.nodes["rpi-A"].waitFor(ctx, "drain in effect"); err != nil {
		return p.stepErr("rpi-A's agent hears of the drain", err)
	}
	if err := p.submit(ctx, "submit e (needs board=rpi4, step hello: echo hello)", "202 QUEUED (queue position 0)",
		oneStep("e", "hello", "echo hello", 0)); err != nil {
		return err
	}
	undrained, err := p.admin.Undrain(ctx, "rpi-A")
	if err != nil {
		return p.stepErr("admin undrains rpi-A", err)
	}
	// Its wake placed e before it was answered.
	e, err := p.api.GetRun(ctx, "e")
	if err != nil {
		return p.stepErr("admin undrains rpi-A", err)
	}
	if err := p.expect("admin undrains rpi-A", "200 idle; e RUNNING on rpi-A",
		fmt.Sprintf("%d %s; e %s", undrained.Status, undrained.Node.State, describe(e.Run))); err != nil {
		return err
	}
	if e, err = p.reported(ctx, "e finishes on rpi-A", "rpi-A", "e", "hello"); err != nil {
		return err
	}
	if err := p.expect("e finishes on rpi-A", "e SUCCEEDED", "e "+describe(e.Run)); err != nil {
		return err
	}

	p.say("SIGTERM to every agent: each drains and exits")
	var want, got []string
	nodes := []string{"rpi-A", "host-B"}
	for _, node := range nodes {
		if err := p.nodes[node].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return p.stepErr("agents exit", err)
		}
	}
	for _, node := range nodes {
		code, err := p.nodes[node].wait(ctx)
		if err != nil {
			return p.stepErr("agents exit", err)
		}
		want, got = append(want, node+" exited 0"), append(got, fmt.Sprintf("%s exited %d", node, code))
	}
	return p.expect("agents exit", strings.Join(want, ", "), strings.Join(got, ", "))
}

// submit posts a run and expects "<status> <state>" back, with the attempt when it is one of
// several.
func (p *play) submit(ctx context.Context, what, want string, run client.RunRequest) error {
	r, err := p.api.Submit(ctx, run)
	if err != nil {
		return p.stepErr(what, err)
	}
	got := status(r.Status, r.Run)
	if r.Run.MaxAttempts > 1 {
		got += attempt(r.Run)
	}
	return p.expect(what, want, got)
}

// history prints a run's history under the current line.
func (p *play) history(events []client.Event) {
	for _, e := range events {
		p.narrate("history: " + line(e))
	}
}

// oneStep is a one-node run needing board=rpi4 with one step running the shell command cmd,
// and maxAttempts attempts (0: the API's default, one).
func oneStep(runID, stepID, cmd string, maxAttempts int) client.RunRequest {
	return client.RunRequest{
		RunID: runID, Needs: []string{"board=rpi4"}, MaxAttempts: maxAttempts,
		Steps: []client.StepRequest{{ID: stepID, Spec: map[string]any{"cmd": cmd}}},
	}
}

func status(code int, r client.Run) string { return fmt.Sprintf("%d %s", code, describe(r)) }

func attempt(r client.Run) string { return attemptOf(r.Attempt, r.MaxAttempts) }

func attemptOf(n, of int) string { return fmt.Sprintf(" (attempt %d of %d)", n, of) }

// unmet is " (unmet: gpu)" for a 422's roles no node could serve.
func unmet(roles []client.Unmet) string {
	var needs []string
	for _, u := range roles {
		needs = append(needs, strings.Join(u.Needs, "+"))
	}
	return " (unmet: " + strings.Join(needs, ", ") + ")"
}

// lostNode finds the event of a run losing its node to a restart and going back to the queue.
func lostNode(events []client.Event) string {
	for _, e := range events {
		if e.Kind == "node_lost" {
			reason, node := "", ""
			if e.Reason != nil {
				reason = *e.Reason
			}
			if e.NodeID != nil {
				node = *e.NodeID
			}
			return fmt.Sprintf("d lost %s (%s) and went back to %s", node, reason, e.To)
		}
	}
	return "no node_lost event in the history: " + kinds(events)
}

// kinds is a history as its event kinds, in order.
func kinds(events []client.Event) string {
	var k []string
	for _, e := range events {
		k = append(k, e.Kind)
	}
	return strings.Join(k, ", ")
}

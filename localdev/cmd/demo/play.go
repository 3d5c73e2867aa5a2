package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"mediator/localdev/fleet"
	"mediator/shared/client"
)

// play is the demo's script: the client's side through api, the fleet's through its nodes.
type play struct {
	api     *api
	n       int         // the number of the last line printed
	rpiA    *fleet.Node // the fleet: one board
	cancels []context.CancelFunc
	nodes   sync.WaitGroup
}

func newPlay(base string) (*play, error) {
	c, err := client.New(base, client.WithToken(clientToken), client.WithUserAgent("mediator-demo"))
	if err != nil {
		return nil, err
	}
	return &play{api: &api{c}}, nil
}

// say prints the next numbered line.
func (p *play) say(format string, args ...any) {
	p.n++
	fmt.Printf("%d. %s\n", p.n, fmt.Sprintf(format, args...))
}

// expect prints "what -> got" as the next line when got is what was wanted, and otherwise
// fails the gate saying both.
func (p *play) expect(what, want, got string) error {
	if got != want {
		return fmt.Errorf("step %d, %s: expected %q, got %q", p.n+1, what, want, got)
	}
	p.say("%s -> %s", what, got)
	return nil
}

// node builds a simulated agent against the stack, narrating under the numbered lines.
func (p *play) node(id string, labels ...string) *fleet.Node {
	return &fleet.Node{
		ID: id, Labels: labels, Base: p.api.Base(), Token: "dev-node-" + id, Interval: fleet.DefaultInterval,
		Log: func(format string, args ...any) { fmt.Printf("     %s: %s\n", id, fmt.Sprintf(format, args...)) },
	}
}

// startNode runs a node's agent loop until stopNodes.
func (p *play) startNode(ctx context.Context, n *fleet.Node) {
	ctx, cancel := context.WithCancel(ctx)
	p.cancels = append(p.cancels, cancel)
	p.nodes.Go(func() { n.Run(ctx) })
}

// stopNodes ends every agent loop and waits for them, before the server goes away.
func (p *play) stopNodes() {
	for _, cancel := range p.cancels {
		cancel()
	}
	p.nodes.Wait()
}

// gate is the core of the contract: placement, queueing, promotion when a node frees, and an at-once
// refusal of what no node of the fleet could ever serve.
func (p *play) gate(ctx context.Context) error {
	fmt.Println("Act 1: placed, queued, promoted, refused")
	p.rpiA = p.node("rpi-A", "board=rpi4")
	hb, err := p.rpiA.Heartbeat(ctx)
	if err != nil {
		return fmt.Errorf("step %d, first heartbeat: %w", p.n+1, err)
	}
	if err := p.expect("fleet: node rpi-A (board=rpi4) heartbeats", "200 idle", fmt.Sprintf("%d %s", hb.Status, hb.Node.State)); err != nil {
		return err
	}
	p.startNode(ctx, p.rpiA)

	if err := p.submit(ctx, "submit a (needs board=rpi4, a 2s step)", "201 RUNNING on rpi-A",
		oneStep("a", "test", "2s", 0)); err != nil {
		return err
	}
	// b's step takes a second so that b is seen RUNNING on rpi-A before it is done.
	if err := p.submit(ctx, "submit b (needs board=rpi4, a 1s step)", "202 QUEUED (queue position 0)",
		oneStep("b", "test", "1s", 0)); err != nil {
		return err
	}
	b, err := p.api.GetRun(ctx, "b")
	if err != nil {
		return err
	}
	if err := p.expect("status b", "200 QUEUED (queue position 0)", status(b.Status, b.Run)); err != nil {
		return err
	}

	if _, err := p.api.await(ctx, "a", "SUCCEEDED", func(r client.Run) bool { return r.State == "SUCCEEDED" }); err != nil {
		return err
	}
	b, err = p.api.await(ctx, "b", "RUNNING", func(r client.Run) bool { return r.State != "QUEUED" })
	if err != nil {
		return err
	}
	if err := p.expect("a finishes on rpi-A", "a SUCCEEDED; b RUNNING on rpi-A", "a SUCCEEDED; b "+describe(b.Run)); err != nil {
		return err
	}

	c, err := p.api.Submit(ctx, client.RunRequest{RunID: "c", Needs: []string{"gpu"}, Steps: []client.StepRequest{{ID: "train"}}})
	if err != nil {
		return err
	}
	if err := p.expect("submit c (needs gpu)", "422 FAILED no_capable_node (unmet: gpu)", status(c.Status, c.Run)+unmet(c.Unmet)); err != nil {
		return err
	}

	b, err = p.api.await(ctx, "b", "SUCCEEDED", func(r client.Run) bool { return r.State != "RUNNING" })
	if err != nil {
		return err
	}
	return p.expect("b finishes on rpi-A", "b SUCCEEDED", "b "+describe(b.Run))
}

// restart is the second act: a run whose node's agent restarts mid-step goes back to the
// queue as its next attempt, is placed again, and finishes.
func (p *play) restart(ctx context.Context) error {
	fmt.Println("\nAct 2: a run survives its node restarting")
	if err := p.submit(ctx, "submit d (needs board=rpi4, a 3s step, max_attempts 2)", "201 RUNNING on rpi-A (attempt 1 of 2)",
		oneStep("d", "flash", "3s", 2)); err != nil {
		return err
	}
	d, err := p.api.await(ctx, "d", "step flash RUNNING", func(r client.Run) bool { return stepState(r, "flash") != "PENDING" })
	if err != nil {
		return err
	}
	if err := p.expect("rpi-A starts d/flash", "d RUNNING on rpi-A, step flash RUNNING"+attemptOf(1, 2),
		"d "+describe(d.Run)+", step flash "+stepState(d.Run, "flash")+attempt(d.Run)); err != nil {
		return err
	}

	// Said before it happens: the agent narrates its new boot_id under this line.
	p.say("restart the agent on rpi-A (boot_id was %s)", p.rpiA.BootID())
	p.rpiA.Restart()

	// The wake after the restart's heartbeat may already have placed d again: both are right.
	d, err = p.api.await(ctx, "d", "attempt 2", func(r client.Run) bool { return r.Attempt == 2 })
	if err != nil {
		return err
	}
	if err := p.expect("Mediator sees the new boot_id", "d lost rpi-A (node_restarted) and went back to QUEUED as attempt 2",
		fmt.Sprintf("%s as attempt %d", lostNode(d.History), d.Run.Attempt)); err != nil {
		return err
	}
	p.history(d.History)

	d, err = p.api.await(ctx, "d", "SUCCEEDED", func(r client.Run) bool { return r.Attempt != 2 || (r.State != "QUEUED" && r.State != "RUNNING") })
	if err != nil {
		return err
	}
	if err := p.expect("d finishes on rpi-A", "d SUCCEEDED"+attemptOf(2, 2), "d "+describe(d.Run)+attempt(d.Run)); err != nil {
		return err
	}
	return p.expect("history of d", "submitted, node_lost, promoted, settled", kinds(d.History))
}

// submit posts a run and expects "<status> <state>" back, with the attempt when it is one of
// several.
func (p *play) submit(ctx context.Context, what, want string, run client.RunRequest) error {
	r, err := p.api.Submit(ctx, run)
	if err != nil {
		return fmt.Errorf("step %d, %s: %w", p.n+1, what, err)
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
		fmt.Printf("     history: %s\n", line(e))
	}
}

// oneStep is a one-node run needing board=rpi4 with one step that takes duration, and
// maxAttempts attempts (0: the API's default, one).
func oneStep(runID, stepID, duration string, maxAttempts int) client.RunRequest {
	return client.RunRequest{
		RunID: runID, Needs: []string{"board=rpi4"}, MaxAttempts: maxAttempts,
		Steps: []client.StepRequest{{ID: stepID, Spec: map[string]any{"duration": duration}}},
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

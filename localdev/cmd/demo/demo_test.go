//go:build linux

package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/mediatorbin"
	"mediator/shared/config"
)

// The demo's acts, played end to end as `make demo` plays them — the mediator binary built
// from this tree, real agent processes, real steps — against a Mediator of the test's own: a
// database of its own, the real handlers behind the local gateway, the demo's lease TTL. The
// play waits on the agents' logs and on the API, never on the clock; its deadline only turns
// a hang into a failure. The stack pushes hints to the agents, as make demo's does.
func TestDemoPlaysEveryAct(t *testing.T) {
	base := serve(t)
	bin, err := mediatorbin.Build(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	p, err := newPlay(base, bin, t.TempDir(), &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop) // should the play not get to its own stop
	ctx, cancel := context.WithTimeout(context.Background(), 2*playTimeout)
	defer cancel()
	err = p.perform(ctx)
	p.stop()
	transcript := out.String()
	t.Logf("the demo said:\n%s", transcript)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"1. start rpi-A's agent (board=rpi4); the fleet shows it -> 200 idle\n",
		"\n     rpi-A: started a/test\n",
		"6. submit c (needs gpu) -> 422 FAILED no_capable_node (unmet: gpu)\n",
		"13. history of d -> submitted, node_lost, promoted, settled\n",
		"\n     host-B: pair/check succeeded, run pair SUCCEEDED\n",
		`17. GET /v1/runs/pair: boot's outputs, check's output -> 200 ip=10.0.0.7; "dut rpi-A at 10.0.0.7"` + "\n",
		"\n     rpi-A: drained by admin:",
		"23. agents exit -> rpi-A exited 0, host-B exited 0\n",
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the demo did not say %q", want)
		}
	}
	if p.n != 23 {
		t.Errorf("%d numbered lines, want 23", p.n)
	}
	for _, a := range p.agents {
		if a.running() {
			t.Errorf("the agent of %s (boot %s) outlived the play", a.node, a.boot())
		}
	}
}

// serve is the test's Mediator on a loopback port, as cmd/mediator's tests serve it, with the
// lease TTL the demo's own stack has.
func serve(t *testing.T) string {
	t.Helper()
	return apitest.New(t, apitest.Push(), apitest.Configure(func(c *config.Config) { c.LeaseTTL = leaseTTL })).Serve()
}

// lockedBuffer is what the play prints, read once the agents are stopped.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

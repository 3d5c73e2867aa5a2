// Command demo plays Mediator out loud against a real local stack and real node agents (`make
// demo`): runs are placed, queued, promoted and refused; a run survives its node's agent
// dying mid-step and coming back; a run of two roles on two nodes passes an output from one
// step to the next; an admin's drain keeps work off a node whose agent runs on; and SIGTERM
// drains every agent to a clean exit. It starts PostgreSQL, a fresh database and the API
// in-process, builds the mediator binary and runs `mediator agent` processes against the API,
// drives the API through its client (shared/client), and stops everything when done.
//
// Each step prints one numbered line with the HTTP status and the state; the agents' logs are
// narrated, indented, under them. The first surprise prints what was expected and what came
// back, and exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"mediator/localdev/mediatorbin"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// playTimeout bounds the acts, so the demo always ends by itself (they take about half of it).
const playTimeout = 55 * time.Second

// leaseTTL is the demo stack's LEASE_TTL_SECONDS. An agent learns of new work at its next
// heartbeat, every TTL/3: at the default (60 s) each act would wait tens of seconds for it.
// The agent's guard kills a lease's work max(2 s, TTL/10) before the lease may expire, so a
// shorter TTL would leave a busy machine too little slack between heartbeats.
const leaseTTL = 9 * time.Second

func main() {
	if err := demo(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func demo() error {
	if !agentOS {
		return fmt.Errorf("the demo runs real `mediator agent` processes, and the agent runs on Linux only (this is %s/%s)",
			runtime.GOOS, runtime.GOARCH)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	dir, err := os.MkdirTemp("", "mediator-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := mediatorbin.Build(ctx, dir)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while building mediator")
		}
		return err
	}
	s, err := startStack(ctx)
	// The stack is stopped even when it only half started: PostgreSQL may be running.
	defer s.Stop()
	if err != nil {
		return err
	}
	fmt.Printf("Mediator is serving on %s (database %s, leases of %s: agents heartbeat every %s)\n",
		s.Base, "mediator_demo", leaseTTL, leaseTTL/3)
	fmt.Printf("Agents run %s, each with a work dir under %s\n\n", bin, dir)

	playCtx, cancel := context.WithTimeout(ctx, playTimeout)
	defer cancel()
	p, err := newPlay(s.Base, bin, dir, os.Stdout)
	if err != nil {
		return err
	}
	// Before the server goes away, and whatever happened: no agent outlives the demo.
	defer p.stop()
	if err := p.perform(playCtx); err != nil {
		return failed(ctx, err)
	}
	fmt.Printf("\nall %d steps as expected in %s\ngate passed\n", p.n, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// failed says why the gate failed, on its own line after the steps that passed: an
// interrupt is not a failure of Mediator, and must not read like one.
func failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("interrupted; the gate was not played to the end")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gate failed: the demo ran out of time (%s): %w", playTimeout, err)
	}
	return fmt.Errorf("gate failed: %w", err)
}

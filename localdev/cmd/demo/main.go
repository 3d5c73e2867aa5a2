// Command demo plays placement, queueing, promotion and refusal out loud against a real local stack (`make demo`): a node
// joins, runs are placed, queued, promoted and refused, then a run survives its node's agent
// restarting. It starts PostgreSQL, a fresh database and the API in-process, drives them over
// HTTP through the API client (shared/client) and a simulated node agent (localdev/fleet), and
// stops everything when done.
//
// Each step prints one numbered line with the HTTP status and the run's state; the first
// surprise prints what was expected and what came back, and exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// playTimeout bounds the acts, so the demo always ends by itself (it takes a few seconds).
const playTimeout = 55 * time.Second

func main() {
	if err := demo(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func demo() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	s, err := startStack(ctx)
	// The stack is stopped even when it only half started: PostgreSQL may be running.
	defer s.Stop()
	if err != nil {
		return err
	}
	fmt.Printf("Mediator is serving on %s (database %s)\n\n", s.Base, "mediator_demo")

	playCtx, cancel := context.WithTimeout(ctx, playTimeout)
	defer cancel()
	p, err := newPlay(s.Base)
	if err != nil {
		return err
	}
	defer p.stopNodes()
	if err := p.gate(playCtx); err != nil {
		return failed(ctx, err)
	}
	if err := p.restart(playCtx); err != nil {
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

package main

import (
	"context"
	"log/slog"
	"os"
	"strconv"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
)

// startStack is `make dev`'s stack on a cluster and a fresh database of the demo's own, so every
// demo starts from an empty fleet and unused run ids, with the demo's lease TTL whatever the
// environment says (the acts' pace depends on it). The handlers' request logs would drown
// the demo's lines; warnings and errors still show. On error, Stop releases what did start.
func startStack(ctx context.Context) (*devserver.Stack, error) {
	if err := os.Setenv("LEASE_TTL_SECONDS", strconv.Itoa(int(leaseTTL.Seconds()))); err != nil {
		return &devserver.Stack{}, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := devserver.Open(ctx, devserver.Options{Cluster: "demo", Database: "mediator_demo", Fresh: true, Log: log, Push: &devserver.LocalPush{}})
	if err != nil {
		return s, err
	}
	return s, s.Serve(0, gateway.DevTokens(), nil, nil)
}

package main

import (
	"context"
	"log/slog"
	"os"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
)

// startStack is `make dev`'s stack on a cluster and a fresh database of the demo's own, so every
// demo starts from an empty fleet and unused run ids. The handlers' request logs would drown
// the demo's lines; warnings and errors still show. On error, Stop releases what did start.
func startStack(ctx context.Context) (*devserver.Stack, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := devserver.Open(ctx, devserver.Options{Cluster: "demo", Database: "mediator_demo", Fresh: true, Log: log})
	if err != nil {
		return s, err
	}
	return s, s.Serve(0, gateway.DevTokens(), nil)
}

// Command mediatorlocal runs Mediator on one machine:
//
//	mediatorlocal serve     make dev: PostgreSQL, migrations, the API on 127.0.0.1, the reaper ticking
//	mediatorlocal migrate   make migrate: the migrate function's code against the local database
//	mediatorlocal stop NAME stop the local PostgreSQL cluster NAME (dev, test, demo, bench) of this checkout
//
// PostgreSQL is DATABASE_URL when set, otherwise a cluster started from the installed server
// binaries with its data under .localdev/ (git-ignored).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
	"mediator/localdev/localpg"
	"mediator/shared/upkeep"
)

func main() {
	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx)
	case "migrate":
		err = migrate(ctx)
	case "stop":
		name := "dev"
		if len(os.Args) > 2 {
			name = os.Args[2]
		}
		var dir string
		if dir, err = localpg.ClusterDir(name); err == nil {
			err = localpg.StopDir(ctx, dir)
		}
	default:
		err = fmt.Errorf("unknown command %q (serve, migrate, stop NAME)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mediatorlocal:", err)
		os.Exit(1)
	}
}

func options() devserver.Options {
	text := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return devserver.Options{Cluster: "dev", Database: "mediator", Logf: func(f string, a ...any) { text.Info(fmt.Sprintf(f, a...)) }}
}

// migrate runs the migrate function's code (Open migrates with it). A cluster it had to start
// is stopped again; one a running `make dev` owns is left alone.
func migrate(ctx context.Context) error {
	s, err := devserver.Open(ctx, options())
	defer s.Stop()
	if err != nil {
		return err
	}
	v, _, err := s.Store.SchemaVersion(ctx)
	fmt.Printf("schema at version %d\n", v)
	return err
}

func serve(ctx context.Context) error {
	s, err := devserver.Open(ctx, options())
	defer s.Stop()
	if err != nil {
		return err
	}
	tokens := gateway.DevTokens()
	if path := os.Getenv("TOKENS_FILE"); path != "" {
		if tokens, err = gateway.LoadTokens(path); err != nil {
			return err
		}
	}
	reap := upkeep.Reap(s.Deps())
	if err := s.Serve(envInt("PORT", 3000), tokens, map[string]http.HandlerFunc{"POST /local/reap": gateway.LocalReap(tokens, reap)}); err != nil {
		return err
	}
	every := time.Duration(envInt("REAP_EVERY_SECONDS", 60)) * time.Second
	go gateway.Ticker(ctx, every, func(ctx context.Context) {
		_, _ = reap(ctx, upkeep.ScheduledEvent("local-"+time.Now().UTC().Format(time.RFC3339)))
	})
	fmt.Printf("\nMediator is serving on %s (reaper every %s)\n  %s\n  try: curl -s %s/healthz\n\n",
		s.Base, every, tokens.Describe(), s.Base)
	return s.Wait(ctx)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

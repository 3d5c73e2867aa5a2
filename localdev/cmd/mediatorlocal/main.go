// Command mediatorlocal runs Mediator on one machine:
//
//	mediatorlocal serve     make dev: PostgreSQL, migrations, the API on 127.0.0.1, the reaper ticking,
//	                        a local S3 keeping the steps' logs (S3_PORT, by default the API's + 2;
//	                        its objects under .localdev/s3-dev), a local MQTT broker pushing hints
//	                        to the agents (mosquitto on a free port, .localdev/mqtt-dev); with AUTH=jwt, a local OAuth 2.0
//	                        issuer beside it and the people's routes behind a JWT authorizer; with
//	                        FRESH=1, on an emptied database
//	mediatorlocal migrate   make migrate: the migrate function's code against the local database
//	mediatorlocal stop NAME stop the local PostgreSQL cluster NAME (dev, test, demo, bench) of this checkout
//
// PostgreSQL is DATABASE_URL when set, otherwise a cluster started from the installed server
// binaries with its data under .localdev/ (git-ignored).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
	"mediator/localdev/issuer"
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
	o := options()
	// The local database keeps its runs and nodes from one make dev to the next; FRESH=1
	// drops it first. Never DATABASE_URL's: that database is the user's own, and dropping it is
	// theirs to do.
	switch fresh := os.Getenv("FRESH"); fresh {
	case "", "0":
	case "1":
		if os.Getenv("DATABASE_URL") != "" {
			return fmt.Errorf("FRESH=1 empties make dev's own database, not DATABASE_URL's: drop and create that one yourself")
		}
		o.Fresh = true
	default:
		return fmt.Errorf("FRESH must be 1 (an emptied database) or 0, not %q", fresh)
	}
	port := envInt("PORT", 3000)
	dir, err := localpg.ClusterDir("dev")
	if err != nil {
		return err
	}
	// Beside the cluster's folder, so that `make clean` removes it with the rest.
	o.S3 = &devserver.LocalS3{Port: envInt("S3_PORT", port+2), Dir: filepath.Join(filepath.Dir(dir), "s3-dev")}
	o.Push = &devserver.LocalPush{Dir: filepath.Join(filepath.Dir(dir), "mqtt-dev")}
	s, err := devserver.Open(ctx, o)
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
	var (
		jwt *gateway.JWTAuthorizer
		iss *issuer.Issuer
	)
	switch mode := os.Getenv("AUTH"); mode {
	case "", "tokens":
	case "jwt":
		lifetime := issuer.DefaultLifetime
		if v := os.Getenv("DEV_TOKEN_SECONDS"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("DEV_TOKEN_SECONDS must be a whole number of seconds, at least 1, not %q", v)
			}
			lifetime = time.Duration(n) * time.Second
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(envInt("ISSUER_PORT", port+1)))
		if iss, err = issuer.Start(addr, issuer.Options{Clients: issuer.DevClients(), Lifetime: lifetime}); err != nil {
			return fmt.Errorf("the local issuer on %s (ISSUER_PORT): %w", addr, err)
		}
		defer iss.Close()
		jwt = &gateway.JWTAuthorizer{Issuer: iss.URL(), Audience: iss.ClientIDs()}
		// The console signs people in at the issuer's sign-in page.
		s.Config.Console = iss.ConsoleSignIn()
	default:
		return fmt.Errorf("AUTH must be tokens (the default) or jwt, not %q", mode)
	}
	reap := upkeep.Reap(s.Deps())
	if err := s.Serve(port, tokens, jwt, map[string]http.HandlerFunc{"POST /local/reap": gateway.LocalReap(tokens, reap)}); err != nil {
		return err
	}
	every := time.Duration(envInt("REAP_EVERY_SECONDS", 60)) * time.Second
	go gateway.Ticker(ctx, every, func(ctx context.Context) {
		_, _ = reap(ctx, upkeep.ScheduledEvent("local-"+time.Now().UTC().Format(time.RFC3339)))
	})
	fmt.Printf("\nMediator is serving on %s (reaper every %s)\n", s.Base, every)
	if iss == nil {
		fmt.Printf("  %s\n", tokens.Describe())
	} else {
		describeJWT(os.Stdout, iss, tokens)
	}
	if s.External {
		fmt.Printf("  PostgreSQL: %s (DATABASE_URL)\n", s.Database)
	} else {
		fmt.Printf("  PostgreSQL: %s (kept from one make dev to the next; FRESH=1 empties it)\n", s.Database)
	}
	if s.S3 != nil {
		fmt.Printf("  steps' logs: a local S3 on %s, bucket %s (S3_PORT; objects in .localdev/s3-dev)\n", s.S3.URL(), s.Config.Logs.Bucket)
	}
	if s.Broker != nil {
		fmt.Printf("  push: hints to the agents through a local mosquitto on %s (IoT's data plane at %s)\n", s.Broker.URL(), s.DataPlane.URL())
	} else {
		fmt.Printf("  steps' logs: bucket %s (LOG_BUCKET)\n", s.Config.Logs.Bucket)
	}
	if iss != nil {
		c := issuer.DevClients()[0]
		fmt.Printf("  try: MEDIATOR_CLIENT_SECRET=%s mediator --url %s --token-url %s --client-id %s queue\n",
			c.Secret, s.Base, iss.TokenURL(), c.ID)
	}
	fmt.Printf("  try: curl -s %s/healthz\n\n", s.Base)
	return s.Wait(ctx)
}

// describeJWT is the banner of make dev AUTH=jwt: where tokens come from and who may have them.
func describeJWT(w io.Writer, iss *issuer.Issuer, tokens *gateway.Tokens) {
	fmt.Fprintf(w, "  people's routes: JWTs of the local issuer %s, checked as API Gateway's JWT authorizer does\n", iss.URL())
	fmt.Fprintf(w, "    client credentials at %s, tokens good for %s (DEV_TOKEN_SECONDS)\n", iss.TokenURL(), iss.Lifetime())
	for _, c := range issuer.DevClients() {
		fmt.Fprintf(w, "    client %-8s secret %-15s scope %s\n", c.ID, c.Secret, strings.Join(c.Scopes, " "))
	}
	fmt.Fprintf(w, "  nodes' routes and POST /local/reap: %s\n", tokens.Describe())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// Command mediatorlocal runs Mediator on one machine:
//
//	mediatorlocal serve     make dev: PostgreSQL, migrations, the API on 127.0.0.1, the reaper ticking
//	mediatorlocal migrate   make migrate: the migrate function's code against the local database
//	mediatorlocal stop NAME stop the local PostgreSQL cluster NAME (dev or test) of this checkout
//
// PostgreSQL is DATABASE_URL when set, otherwise a cluster started from the installed server
// binaries with its data under .localdev/ (git-ignored).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/gateway"
	"mediator/localdev/localpg"
	"mediator/shared/config"
	"mediator/shared/httpapi"
	"mediator/shared/migrator"
	"mediator/shared/reaper"
	"mediator/shared/startup"
	"mediator/shared/store"
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
		err = localpg.StopDir(ctx, filepath.Join(".localdev", "pg-"+name))
	default:
		err = fmt.Errorf("unknown command %q (serve, migrate, stop NAME)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mediatorlocal:", err)
		os.Exit(1)
	}
}

// local is the database and configuration `make dev` and `make migrate` share.
type local struct {
	server *localpg.Server
	cfg    config.Config
	log    *slog.Logger
}

func setUp(ctx context.Context) (*local, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	server, err := localpg.Ensure(ctx, localpg.Options{
		Dir:  filepath.Join(".localdev", "pg-dev"),
		Logf: func(f string, a ...any) { log.Info(fmt.Sprintf(f, a...)) },
	})
	if err != nil {
		return nil, err
	}
	url := server.URL
	if !server.External {
		if url, err = ensureDatabase(ctx, server.URL, "mediator"); err != nil {
			return nil, err
		}
	}
	// Every setting of SPEC.md §8 comes from this process's environment, as in a function;
	// only the database and the pool size have local defaults.
	cfg, err := config.Load(func(name string) string {
		switch v := os.Getenv(name); {
		case name == "DATABASE_URL":
			return url
		case name == "DB_MAX_CONNS" && v == "":
			return "8"
		default:
			return v
		}
	})
	if err != nil {
		return nil, err
	}
	return &local{server: server, cfg: cfg, log: log}, nil
}

func (l *local) openStore(ctx context.Context) (*store.Store, error) {
	logJSON := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l.cfg.LogLevel}))
	return startup.OpenStore(ctx, l.cfg, "mediator-local", logJSON)
}

func migrate(ctx context.Context) error {
	l, err := setUp(ctx)
	if err != nil {
		return err
	}
	st, err := l.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := migrator.Handler(st, l.log)(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Printf("schema at version %d\n", res.SchemaVersion)
	return nil
}

func serve(ctx context.Context) error {
	l, err := setUp(ctx)
	if err != nil {
		return err
	}
	if !l.server.External {
		defer func() {
			if err := l.server.Stop(context.Background()); err != nil {
				l.log.Warn("stopping PostgreSQL", "error", err)
			}
		}()
	}
	st, err := l.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := migrator.Handler(st, l.log)(ctx, nil); err != nil {
		return err
	}
	logJSON := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l.cfg.LogLevel}))
	deps := httpapi.Deps{Store: st, Config: l.cfg, Log: logJSON}
	tokens := gateway.DevTokens()
	if path := os.Getenv("TOKENS_FILE"); path != "" {
		if tokens, err = gateway.LoadTokens(path); err != nil {
			return err
		}
	}
	reap := reaper.Handler(st, logJSON)
	gw := &gateway.Gateway{
		Routes: httpapi.Routes, Functions: httpapi.Functions(deps), Tokens: tokens, Log: logJSON,
		Extra: map[string]http.HandlerFunc{"POST /local/reap": gateway.LocalReap(tokens, reap)},
	}
	port := envInt("PORT", 3000)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	every := time.Duration(envInt("REAP_EVERY_SECONDS", 60)) * time.Second
	go gateway.Ticker(ctx, every, func(ctx context.Context) {
		_, _ = reap(ctx, reaper.ScheduledEvent("local-"+time.Now().UTC().Format(time.RFC3339)))
	})
	fmt.Printf("\nMediator is serving on http://%s (reaper every %s)\n  %s\n  try: curl -s http://%s/healthz\n\n",
		ln.Addr(), every, tokens.Describe(), ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", err
		}
	}
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name), nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

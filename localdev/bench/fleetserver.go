package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
	"mediator/shared/auth"
	"mediator/shared/httpapi"
	"mediator/shared/startup"
)

// The fleet's handlers run in a process of their own, as Lambda runs them: apart from the
// load generator's goroutines, so that the generator's scheduling (ten thousand timers on the
// same two cores) is not counted as the server's, and each call's own time (its Server-Timing)
// can be set beside what the generator saw. The generator and the server still share the
// machine's cores, and PostgreSQL.

// serveFleet is the server process (-fleet-server): the bench stack's handlers behind the local
// gateway on 127.0.0.1, under the fleet's LEASE_TTL, without push. It prints its address and
// serves until its standard input closes (the bench ended, or died).
func serveFleet() error {
	ctx := context.Background()
	quiet := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *fleetTrace != "" {
		f, err := os.Create(*fleetTrace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	cfg, err := devserver.LoadConfig(os.Getenv(fleetDatabaseEnv))
	if err != nil {
		return err
	}
	st, err := startup.OpenStore(ctx, cfg, "mediator-bench-fleet", quiet)
	if err != nil {
		return err
	}
	s := &devserver.Stack{Store: st, Config: cfg, Log: quiet}
	defer s.Stop()
	// The pool's own account: how often a handler found every connection taken, and how long
	// it waited for one — the queue a burst builds, which no statement's time shows.
	pool := map[string]http.HandlerFunc{"GET " + poolPath: func(w http.ResponseWriter, _ *http.Request) {
		ps := st.Pool().Stat()
		_ = json.NewEncoder(w).Encode(poolStat{Acquires: ps.AcquireCount(), Waited: ps.EmptyAcquireCount(), Wait: ps.AcquireDuration()})
	}}
	if err := s.Serve(0, gateway.DevTokens(), nil, pool); err != nil {
		return err
	}
	fmt.Println(s.Base)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// poolPath is the server process's own route for its pool's figures.
const poolPath = "/local/pool"

// poolStat is the server's pool so far: acquires, how many found no connection free, and the
// time all acquires waited.
type poolStat struct {
	Acquires int64         `json:"acquires"`
	Waited   int64         `json:"waited"`
	Wait     time.Duration `json:"wait"`
}

// pool reads the server process's pool figures.
func (h *httpAPI) pool(ctx context.Context) (poolStat, error) {
	var ps poolStat
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+poolPath, nil)
	if err != nil {
		return ps, err
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return ps, err
	}
	defer resp.Body.Close()
	return ps, json.NewDecoder(resp.Body).Decode(&ps)
}

// fleetDatabaseEnv hands the server process the application role's URL of the bench's
// database, which this process set up.
const fleetDatabaseEnv = "BENCH_FLEET_DATABASE_URL"

// startFleetServer starts the server process with the environment of this one but for the
// lease length (which sets the cadence the nodes are told) and the pool, and calls it over HTTP.
//
// The pool stands for RDS Proxy's connections to the database, not for the Lambda environments
// in front of the proxy: a handler waits for one here as an environment waits at the proxy for
// a database connection (ConnectionBorrowTimeout). By default two per core of the machine
// PostgreSQL runs on (-fleet-conns): transactions at once beyond that find no core to run on,
// and while the scheduler has preempted the backend flushing the WAL, every commit behind the
// flush waits with the connection it holds — and every handler behind those, for a connection:
// a tail of tens of milliseconds made of waiting, not of work (README, Performance).
func (b *bench) startFleetServer(ctx context.Context, ttl time.Duration) (*httpAPI, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	args := []string{"-fleet-server"}
	if *fleetTrace != "" {
		args = append(args, "-fleet-trace", *fleetTrace)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "LEASE_TTL_SECONDS="+strconv.Itoa(int(ttl.Seconds())), fleetDatabaseEnv+"="+b.stack.Config.Database.URL,
		"DB_MAX_CONNS="+strconv.Itoa(*fleetC))
	cmd.Stderr = os.Stderr // GODEBUG=gctrace=1 on the bench shows the server's collections here
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() { _ = stdin.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("the fleet's server process did not start: %w", err)
	}
	// One connection per call in flight, kept: the nodes' calls are short and few at a time,
	// and a new connection per call would cost the generator more than the call.
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &httpAPI{base: strings.TrimSpace(line), hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, stop, nil
}

// httpAPI calls the handlers over HTTP, as the local gateway serves them, with the
// development tokens of each principal.
type httpAPI struct {
	base string
	hc   *http.Client
}

func (h *httpAPI) do(ctx context.Context, who auth.Principal, method, target string, body any) call {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+target, bytes.NewReader(raw))
	if err != nil {
		panic(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+devToken(who))
	start := time.Now()
	resp, err := h.hc.Do(req)
	if err != nil {
		return call{status: 599, body: []byte(err.Error()), took: time.Since(start)}
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return call{status: 599, body: []byte(err.Error()), took: took}
	}
	return call{status: resp.StatusCode, body: out, took: took, server: serverTiming(resp.Header.Get("server-timing"))}
}

// serverTiming reads the handler's own time from its Server-Timing header; 0 without one.
func serverTiming(h string) time.Duration {
	v, ok := strings.CutPrefix(h, httpapi.ServerTimingMetric+";dur=")
	if !ok {
		return 0
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// devToken is the local gateway's development token for who.
func devToken(who auth.Principal) string {
	switch who.Kind {
	case auth.Node:
		return "dev-node-" + who.ID
	case auth.Admin:
		return "dev-admin"
	}
	return "dev-client-" + who.ID
}

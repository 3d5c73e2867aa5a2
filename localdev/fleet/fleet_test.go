package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/localdev/fleet"
	"mediator/localdev/gateway"
	"mediator/shared/httpapi"
)

// serve puts a test's Mediator behind the local gateway on a loopback port, as `make dev` does.
func serve(t *testing.T) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t)
	gw := &gateway.Gateway{
		Routes: httpapi.Routes, Functions: env.Functions, Tokens: gateway.DevTokens(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return env, srv.URL
}

// start runs the node's loop until the test ends, and checks that it stops promptly then.
func start(t *testing.T, n *fleet.Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

func node(base, id string, interval time.Duration) *fleet.Node {
	return &fleet.Node{ID: id, Labels: []string{"board=rpi4"}, Base: base, Token: "dev-node-" + id, Interval: interval}
}

func submit(t *testing.T, env *apitest.Env, body map[string]any, want int) {
	t.Helper()
	if r := env.Do(apitest.Client("t"), "POST", "/v1/runs", body); r.Status != want {
		t.Fatalf("submit: %s, want %d", r, want)
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A step unlocked by a success is started from the report's `next`, not from a heartbeat:
// with an hour between heartbeats, only that can finish the run.
func TestNextStepsRunWithoutAHeartbeat(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n := node(base, "n1", time.Hour)
	if hb, err := n.Heartbeat(context.Background()); err != nil || hb.Status != 200 || hb.Node.State != "idle" {
		t.Fatalf("first heartbeat: %+v %v", hb, err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"}, "steps": []any{
		map[string]any{"id": "build", "spec": map[string]any{"duration": "50ms"}},
		map[string]any{"id": "test", "after": []string{"build"}},
	}}, 201)
	start(t, n)
	eventually(t, "r SUCCEEDED", func() bool { return env.State("r") == "SUCCEEDED" })
	env.CheckInvariants()
}

// A restart mid-step: the old boot's work is dropped, the run comes back as attempt 2 on the
// new boot and finishes there.
func TestRestartMidStep(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n := node(base, "n1", 20*time.Millisecond)
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"}, "max_attempts": 2,
		"steps": []any{map[string]any{"id": "s", "spec": map[string]any{"duration": "300ms"}}}}, 201)
	start(t, n)
	eventually(t, "the step RUNNING", func() bool {
		return env.Count(`SELECT count(*) FROM steps WHERE run_id = 'r' AND state = 'RUNNING'`) == 1
	})
	n.Restart()
	eventually(t, "r SUCCEEDED", func() bool { return env.State("r") == "SUCCEEDED" })
	if a := env.Count(`SELECT attempt FROM runs WHERE run_id = 'r'`); a != 2 {
		t.Fatalf("finished on attempt %d, want 2", a)
	}
	env.CheckInvariants()
}

// A cancel reaches a running step through the heartbeats taken while it runs.
func TestCancelStopsARunningStep(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n := node(base, "n1", 20*time.Millisecond)
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"},
		"steps": []any{map[string]any{"id": "s", "spec": map[string]any{"duration": "1m"}}}}, 201)
	start(t, n)
	eventually(t, "the step RUNNING", func() bool {
		return env.Count(`SELECT count(*) FROM steps WHERE run_id = 'r' AND state = 'RUNNING'`) == 1
	})
	if r := env.Do(apitest.Client("t"), "POST", "/v1/runs/r/cancel", map[string]any{"reason": "test"}); r.Status != 202 {
		t.Fatalf("cancel: %s", r)
	}
	eventually(t, "r CANCELLED", func() bool { return env.State("r") == "CANCELLED" })
	env.CheckInvariants()
}

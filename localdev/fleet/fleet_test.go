package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/localdev/fleet"
)

// serve puts a test's Mediator behind the local gateway on a loopback port, as `make dev` does.
func serve(t *testing.T) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t)
	return env, env.Serve()
}

// start runs the node's loop until the test ends, and checks that it stops then. The bound is
// a guard against a hang, not a timing claim: a request in flight is finished, not cut.
func start(t *testing.T, n *fleet.Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

// node is a simulated agent whose narration the test reads: it waits for what the node says it
// did, not for the clock.
func node(t *testing.T, base, id string, interval time.Duration) (*fleet.Node, *narration) {
	said := &narration{t: t, changed: make(chan struct{})}
	return &fleet.Node{ID: id, Labels: []string{"board=rpi4"}, Base: base, Token: "dev-node-" + id,
		Interval: interval, Log: said.add}, said
}

// narration is what a node said, in order, and a channel closed at each new line.
type narration struct {
	t       *testing.T
	mu      sync.Mutex
	lines   []string
	read    int
	changed chan struct{}
}

func (s *narration) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor consumes lines until one contains want, and returns it. The deadline only turns a
// node that never gets there into a failure instead of a hang.
func (s *narration) waitFor(want string) string {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		for s.read < len(s.lines) {
			line := s.lines[s.read]
			s.read++
			if strings.Contains(line, want) {
				s.mu.Unlock()
				return line
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			s.t.Fatalf("the node never said %q; it said:\n%s", want, strings.Join(s.lines, "\n"))
		}
	}
}

func submit(t *testing.T, env *apitest.Env, body map[string]any, want int) {
	t.Helper()
	if r := env.Do(apitest.Client("t"), "POST", "/v1/runs", body); r.Status != want {
		t.Fatalf("submit: %s, want %d", r, want)
	}
}

// A step unlocked by a success is started from the report's `next`, not from a heartbeat:
// with an hour between heartbeats, only that can finish the run.
func TestNextStepsRunWithoutAHeartbeat(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n, said := node(t, base, "n1", time.Hour)
	if hb, err := n.Heartbeat(context.Background()); err != nil || hb.Status != 200 || hb.Node.State != "idle" {
		t.Fatalf("first heartbeat: %+v %v", hb, err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"}, "steps": []any{
		map[string]any{"id": "build", "spec": map[string]any{"duration": "50ms"}},
		map[string]any{"id": "test", "after": []string{"build"}},
	}}, 201)
	start(t, n)
	said.waitFor("r/test succeeded -> run SUCCEEDED")
	if state := env.State("r"); state != "SUCCEEDED" {
		t.Fatalf("the node was told SUCCEEDED; the run is %s", state)
	}
	env.CheckInvariants()
}

// A restart mid-step: the old boot's work is dropped as soon as a heartbeat shows its lease is
// gone, and the run comes back as attempt 2 and starts again on the new boot.
func TestRestartMidStep(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n, said := node(t, base, "n1", 20*time.Millisecond)
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"}, "max_attempts": 2,
		"steps": []any{map[string]any{"id": "s", "spec": map[string]any{"duration": "1h"}}}}, 201)
	start(t, n)
	first := said.waitFor("r/s started")
	n.Restart()
	said.waitFor("is gone; dropping the work")
	again := said.waitFor("r/s started")
	if first == again {
		t.Fatalf("started twice under one lease: %s", again)
	}
	if a := env.Count(`SELECT attempt FROM runs WHERE run_id = 'r' AND state = 'RUNNING'`); a != 2 {
		t.Fatalf("running attempt %d, want 2", a)
	}
	env.CheckInvariants()
}

// A cancel reaches a running step through the heartbeats taken while it runs.
func TestCancelStopsARunningStep(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n, said := node(t, base, "n1", 20*time.Millisecond)
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"},
		"steps": []any{map[string]any{"id": "s", "spec": map[string]any{"duration": "1h"}}}}, 201)
	start(t, n)
	said.waitFor("r/s started")
	if r := env.Do(apitest.Client("t"), "POST", "/v1/runs/r/cancel", map[string]any{"reason": "test"}); r.Status != 202 {
		t.Fatalf("cancel: %s", r)
	}
	said.waitFor("r/s cancelled -> run CANCELLED")
	if state := env.State("r"); state != "CANCELLED" {
		t.Fatalf("the node was told CANCELLED; the run is %s", state)
	}
	env.CheckInvariants()
}

// A step whose spec has a non-zero exit_code is reported failed with it, and fails the run.
func TestAFailingStepFailsTheRun(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	n, said := node(t, base, "n1", 20*time.Millisecond)
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	submit(t, env, map[string]any{"run_id": "r", "needs": []string{"board=rpi4"},
		"steps": []any{map[string]any{"id": "s", "spec": map[string]any{"exit_code": 3}}}}, 201)
	start(t, n)
	said.waitFor("r/s failed (exit 3) -> run FAILED")
	if code := env.Count(`SELECT exit_code FROM steps WHERE run_id = 'r' AND step_id = 's'`); code != 3 {
		t.Fatalf("the step's exit code is %d, want 3", code)
	}
	env.CheckInvariants()
}

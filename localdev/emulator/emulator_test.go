package emulator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/emulator"
	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/store"
)

var functions = []string{"submit", "query", "nodes", "result", "cancel", "reap", "migrate"}

var (
	buildOnce  sync.Once
	rie        string
	bootstraps map[string]string
	buildErr   error
)

// built installs the emulator and builds every bootstrap, once per test binary.
func built(t *testing.T) (string, map[string]string) {
	t.Helper()
	buildOnce.Do(func() {
		ctx := context.Background()
		if rie, buildErr = emulator.Install(ctx); buildErr != nil {
			return
		}
		out, err := os.MkdirTemp("", "mediator-bootstraps-")
		if err != nil {
			buildErr = err
			return
		}
		bootstraps, buildErr = emulator.Build(ctx, "../..", out, functions...)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return rie, bootstraps
}

// stack runs every function under its own emulator against one database.
type stack struct {
	t   *testing.T
	fns map[string]*emulator.Function
}

func startStack(t *testing.T, dbURL string, names ...string) *stack {
	t.Helper()
	rie, bins := built(t)
	s := &stack{t: t, fns: map[string]*emulator.Function{}}
	for _, name := range names {
		f, err := emulator.Start(context.Background(), rie, bins[name], name, []string{"DATABASE_URL=" + dbURL, "LOG_LEVEL=info"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Stop)
		s.fns[name] = f
	}
	return s
}

// event reads localdev/events/<file>.json and lets the caller adjust it.
func event(t *testing.T, file string, adjust func(*events.APIGatewayV2HTTPRequest)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "events", file+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("%s.json is not an API Gateway v2 event: %v", file, err)
	}
	if adjust != nil {
		adjust(&ev)
	}
	b, _ := json.Marshal(ev)
	return b
}

// call invokes an HTTP function and returns its status and body.
func (s *stack) call(fn string, ev []byte) (int, string) {
	s.t.Helper()
	out, err := s.fns[fn].Invoke(context.Background(), ev)
	if err != nil {
		s.t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		s.t.Fatalf("%s answered no HTTP response: %s", fn, out)
	}
	return resp.StatusCode, resp.Body
}

func withBody(v any) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		b, _ := json.Marshal(v)
		ev.Body = string(b)
	}
}

func onRun(id string, body any) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) {
		for k, v := range ev.PathParameters {
			ev.PathParameters[k] = strings.ReplaceAll(v, "nightly-42", id)
		}
		ev.RawPath = strings.ReplaceAll(ev.RawPath, "nightly-42", id)
		ev.RequestContext.HTTP.Path = ev.RawPath
		if body != nil {
			withBody(body)(ev)
		}
	}
}

func runState(t *testing.T, body string) store.Run {
	t.Helper()
	var r struct {
		Run store.Run `json:"run"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("no run in %s", body)
	}
	return r.Run
}

// The deploy path, then placement, queueing, promotion and refusal, through the compiled bootstraps under the emulator: the
// functions refuse an unmigrated database; the migrate function migrates it; then a is placed,
// b waits, a's node reports, b runs on the node a freed, c (gpu) fails at once; the reaper
// answers its summary. Every function's cold-start init time is recorded.
func TestDeployThenPlaceQueuePromoteRefuseUnderTheEmulator(t *testing.T) {
	t.Parallel()
	dbURL := testdb.URL(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.MigrateDown(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	// Before the migrate function has run, a function refuses to start.
	early := startStack(t, dbURL, "query")
	if _, err := early.fns["query"].Invoke(ctx, event(t, "query", nil)); err == nil {
		t.Fatalf("the query function served an unmigrated database:\n%s", early.fns["query"].Log())
	}
	waitLog(t, early.fns["query"], "run the migrate function")

	s := startStack(t, dbURL, functions...)
	out, err := s.fns["migrate"].Invoke(ctx, []byte("{}"))
	if err != nil || !strings.Contains(string(out), fmt.Sprintf(`"schema_version":%d`, migrations.Latest())) {
		t.Fatalf("migrate: %s %v", out, err)
	}

	if code, body := s.call("nodes", event(t, "nodes", nil)); code != 200 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	submit := func(id string, needs string) (int, store.Run) {
		code, body := s.call("submit", event(t, "submit", withBody(map[string]any{
			"run_id": id, "needs": []string{needs}, "steps": []map[string]any{{"id": "test"}}})))
		return code, runState(t, body)
	}
	if code, a := submit("a", "board=rpi4"); code != 201 || a.State != store.Running || a.Assigned["main"] != "rpi-a" {
		t.Fatalf("submit a: %d %+v", code, a)
	}
	if code, b := submit("b", "board=rpi4"); code != 202 || b.State != store.Queued {
		t.Fatalf("submit b: %d %+v", code, b)
	}
	if code, body := s.call("query", event(t, "query", onRun("b", nil))); code != 200 || runState(t, body).State != store.Queued {
		t.Fatalf("status b: %d %s", code, body)
	}
	_, beat := s.call("nodes", event(t, "nodes", nil))
	var hb struct {
		Lease store.HeldLease `json:"lease"`
	}
	_ = json.Unmarshal([]byte(beat), &hb)
	for _, status := range []string{"started", "succeeded"} {
		report := map[string]any{"node_id": "rpi-a", "boot_id": "boot-1", "epoch": hb.Lease.Epoch, "status": status, "exit_code": 0}
		if code, body := s.call("result", event(t, "result", onRun("a", report))); code != 200 {
			t.Fatalf("a %s: %d %s", status, code, body)
		}
	}
	if _, body := s.call("query", event(t, "query", onRun("a", nil))); runState(t, body).State != store.Succeeded {
		t.Fatalf("a: %s", body)
	}
	if _, body := s.call("query", event(t, "query", onRun("b", nil))); runState(t, body).State != store.Running || runState(t, body).Assigned["main"] != "rpi-a" {
		t.Fatalf("b after a finished: %s", body)
	}
	if code, c := submit("c", "gpu"); code != 422 || c.State != store.Failed {
		t.Fatalf("submit c: %d %+v", code, c)
	}
	if code, body := s.call("cancel", event(t, "cancel", onRun("b", map[string]any{"reason": "done"}))); code != 202 && code != 200 {
		t.Fatalf("cancel b: %d %s", code, body)
	}
	out, err = s.fns["reap"].Invoke(ctx, mustRead(t, "reap"))
	if err != nil || !strings.Contains(string(out), `"expired":0`) {
		t.Fatalf("reap: %s %v", out, err)
	}

	for _, name := range functions {
		d, err := s.fns[name].InitDuration(withLogTimeout(t))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("cold start: %-8s init %v", name, d.Round(100*time.Microsecond))
	}
	// Every invocation wrote one structured line with its request id, route, status and run
	// (c's is the last of the three).
	waitLog(t, s.fns["submit"], `"run_id":"c"`)
	requests := 0
	for _, line := range s.fns["submit"].LogLines() {
		if strings.Contains(line, `"msg":"request"`) {
			requests++
			for _, field := range []string{`"request_id":"req-submit-1"`, `"route":"POST /v1/runs"`, `"status":`, `"run_id":"`, `"duration_ms":`} {
				if !strings.Contains(line, field) {
					t.Errorf("the request log line lacks %s: %s", field, line)
				}
			}
		}
	}
	if requests != 3 {
		t.Errorf("submit logged %d request lines for three submits", requests)
	}
}

// withLogTimeout bounds a wait for output that is already on its way (see WaitLog).
func withLogTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitLog(t *testing.T, f *emulator.Function, want string) {
	t.Helper()
	if out, err := f.WaitLog(withLogTimeout(t), want); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

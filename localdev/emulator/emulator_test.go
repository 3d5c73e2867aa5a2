package emulator_test

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/emulator"
	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/store"
	"mediator/shared/upkeep"
	"mediator/shared/wire"
)

var functions = []string{"submit", "query", "nodes", "result", "cancel", "reap", "migrate"}

// bootstraps is one set of built functions and how the emulator runs them, built once per
// test binary. The host's and the arm64 set build side by side when their tests run in parallel.
type bootstraps struct {
	build  func(ctx context.Context, moduleRoot, outDir string, names ...string) (map[string]string, error)
	runner func() (string, error) // nil: the bootstraps run themselves

	once sync.Once
	dir  string // removed when the tests end
	with string // the runner, "" for none
	bins map[string]string
	err  error
}

var (
	// host is built for this machine: the quick way to play every scenario.
	host = &bootstraps{build: emulator.Build}
	// arm64 is what `sam build` leaves and Lambda runs on Graviton, run here under qemu.
	arm64 = &bootstraps{build: emulator.BuildDeployed, runner: emulator.Arm64Runner}

	rieOnce sync.Once
	rie     string
	rieErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []*bootstraps{host, arm64} {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

// built installs the emulator and builds every bootstrap of b, once per test binary. A missing
// runner fails before anything is built.
func (b *bootstraps) built(t *testing.T) (string, map[string]string) {
	t.Helper()
	rieOnce.Do(func() { rie, rieErr = emulator.Install(context.Background()) })
	if rieErr != nil {
		t.Fatal(rieErr)
	}
	b.once.Do(func() {
		if b.runner != nil {
			if b.with, b.err = b.runner(); b.err != nil {
				return
			}
		}
		if b.dir, b.err = os.MkdirTemp("", "mediator-bootstraps-"); b.err != nil {
			return
		}
		b.bins, b.err = b.build(context.Background(), "../..", b.dir, functions...)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return rie, b.bins
}

// stack runs every function under its own emulator against one database: the migrate
// function as the migrator, the others as the application role, as a deploy gives them.
type stack struct {
	t   *testing.T
	fns map[string]*emulator.Function
}

func startStack(t *testing.T, b *bootstraps, dbURL string, names ...string) *stack {
	t.Helper()
	rie, bins := b.built(t)
	s := &stack{t: t, fns: map[string]*emulator.Function{}}
	for _, name := range names {
		login := testdb.App(dbURL)
		if name == "migrate" {
			login = dbURL
		}
		// IAM_NODE_ROLE as template.yaml passes it by default: the role the node events of
		// localdev/events are signed by.
		f, err := emulator.StartUnder(context.Background(), rie, b.with, bins[name], name,
			[]string{"DATABASE_URL=" + login, "DB_APP_USER=" + testdb.Roles().App, "LOG_LEVEL=info", "IAM_NODE_ROLE=mediator-node"})
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
	early := startStack(t, host, dbURL, "query")
	if _, err := early.fns["query"].Invoke(ctx, event(t, "query", nil)); err == nil {
		t.Fatalf("the query function served an unmigrated database:\n%s", early.fns["query"].Log())
	}
	waitLog(t, early.fns["query"], "run the migrate function")

	s := startStack(t, host, dbURL, functions...)
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
	if code, a := submit("a", "board=rpi4"); code != 201 || a.State != wire.Running || a.Assigned["main"] != "rpi-a" {
		t.Fatalf("submit a: %d %+v", code, a)
	}
	if code, b := submit("b", "board=rpi4"); code != 202 || b.State != wire.Queued {
		t.Fatalf("submit b: %d %+v", code, b)
	}
	if code, body := s.call("query", event(t, "query", onRun("b", nil))); code != 200 || runState(t, body).State != wire.Queued {
		t.Fatalf("status b: %d %s", code, body)
	}
	_, beat := s.call("nodes", event(t, "nodes", nil))
	var hb struct {
		Lease store.HeldLease `json:"lease"`
	}
	_ = json.Unmarshal([]byte(beat), &hb)
	for _, status := range []string{"started", "succeeded"} {
		report := map[string]any{"node_id": "rpi-a", "boot_id": "boot-1", "epoch": hb.Lease.Epoch, "status": status}
		if status == "succeeded" {
			report["exit_code"] = 0
		}
		if code, body := s.call("result", event(t, "result", onRun("a", report))); code != 200 {
			t.Fatalf("a %s: %d %s", status, code, body)
		}
	}
	if _, body := s.call("query", event(t, "query", onRun("a", nil))); runState(t, body).State != wire.Succeeded {
		t.Fatalf("a: %s", body)
	}
	if _, body := s.call("query", event(t, "query", onRun("b", nil))); runState(t, body).State != wire.Running || runState(t, body).Assigned["main"] != "rpi-a" {
		t.Fatalf("b after a finished: %s", body)
	}
	if code, c := submit("c", "gpu"); code != 422 || c.State != wire.Failed {
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

// The bootstraps that deploy, as `make build-<LogicalId>` leaves them for `sam build` (static
// linux/arm64), run under the emulator through qemu: the migrate function migrates and answers
// the schema version, the query function's /healthz answers from a cold start, a heartbeat and
// a submit write and read back, and result, cancel and reap serve one call each. Each
// function's cold-start init time is recorded; under software emulation it says nothing about
// Lambda's, only that init completes.
func TestDeployedArm64BootstrapsUnderTheEmulator(t *testing.T) {
	t.Parallel()
	_, bins := arm64.built(t)
	for _, name := range functions {
		if err := staticArm64(bins[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
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

	s := startStack(t, arm64, dbURL, functions...)
	out, err := s.fns["migrate"].Invoke(ctx, []byte("{}"))
	if err != nil || !strings.Contains(string(out), fmt.Sprintf(`"schema_version":%d`, migrations.Latest())) {
		t.Fatalf("migrate: %s %v", out, err)
	}

	// /healthz is public: no authorizer, no credentials.
	code, body := s.call("query", event(t, "query", func(ev *events.APIGatewayV2HTTPRequest) {
		ev.RouteKey, ev.RequestContext.RouteKey = "GET /healthz", "GET /healthz"
		ev.RawPath, ev.RequestContext.HTTP.Path = "/healthz", "/healthz"
		ev.PathParameters, ev.RequestContext.Authorizer = nil, nil
		delete(ev.Headers, "authorization")
	}))
	var health struct {
		Status        string `json:"status"`
		SchemaVersion uint   `json:"schema_version"`
	}
	if err := json.Unmarshal([]byte(body), &health); code != 200 || err != nil || health.Status != "ok" || health.SchemaVersion != migrations.Latest() {
		t.Fatalf("healthz: %d %s", code, body)
	}

	if code, body := s.call("nodes", event(t, "nodes", nil)); code != 200 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	code, body = s.call("submit", event(t, "submit", withBody(map[string]any{
		"run_id": "a", "needs": []string{"board=rpi4"}, "steps": []map[string]any{{"id": "test"}}})))
	if a := runState(t, body); code != 201 || a.State != wire.Running || a.Assigned["main"] != "rpi-a" {
		t.Fatalf("submit a: %d %s", code, body)
	}
	if code, body := s.call("query", event(t, "query", onRun("a", nil))); code != 200 || runState(t, body).State != wire.Running {
		t.Fatalf("status a: %d %s", code, body)
	}
	// Result (with the epoch of the lease a heartbeat reports), cancel and reap serve one call
	// each, so every deployed bootstrap has started here.
	_, beat := s.call("nodes", event(t, "nodes", nil))
	var hb struct {
		Lease store.HeldLease `json:"lease"`
	}
	_ = json.Unmarshal([]byte(beat), &hb)
	report := map[string]any{"node_id": "rpi-a", "boot_id": "boot-1", "epoch": hb.Lease.Epoch, "status": "started"}
	if code, body := s.call("result", event(t, "result", onRun("a", report))); code != 200 {
		t.Fatalf("a started: %d %s", code, body)
	}
	if code, body := s.call("cancel", event(t, "cancel", onRun("a", map[string]any{"reason": "done"}))); code != 202 && code != 200 {
		t.Fatalf("cancel a: %d %s", code, body)
	}
	if out, err := s.fns["reap"].Invoke(ctx, mustRead(t, "reap")); err != nil || !strings.Contains(string(out), `"expired":0`) {
		t.Fatalf("reap: %s %v", out, err)
	}

	for _, name := range functions {
		d, err := s.fns[name].InitDuration(withLogTimeout(t))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("cold start (arm64 under qemu): %-8s init %v", name, d.Round(time.Millisecond))
	}
}

// The migrate bootstrap builds nothing before lambda.Start: with a setting it cannot start
// with, it still answers a deploy's custom resource at the event's response URL — the Create
// FAILED, naming the setting, and the rollback's Delete SUCCESS — where an init error would
// answer nothing and leave the stack waiting for CloudFormation's timeout.
func TestMigrateAnswersCloudFormationWithABadSettingUnderTheEmulator(t *testing.T) {
	t.Parallel()
	rie, bins := host.built(t)
	ctx := context.Background()
	f, err := emulator.StartUnder(ctx, rie, "", bins["migrate"], "migrate",
		[]string{"DATABASE_URL=postgres://mediator@127.0.0.1:1/mediator", "LEASE_TTL_SECONDS=sixty"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	answers := make(chan cfn.Response, 4)
	s3 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var resp cfn.Response
		if err := json.NewDecoder(r.Body).Decode(&resp); r.Method != http.MethodPut || err != nil {
			t.Errorf("the response URL got %s (%v)", r.Method, err)
		}
		answers <- resp
	}))
	t.Cleanup(s3.Close)
	for _, kind := range []cfn.RequestType{cfn.RequestCreate, cfn.RequestDelete} {
		ev := cfn.Event{
			RequestType: kind, RequestID: "req-" + string(kind), ResponseURL: s3.URL + "/response?X-Amz-Signature=1",
			ResourceType: "Custom::DatabaseSchema", LogicalResourceID: "DatabaseSchema",
			StackID:            "arn:aws:cloudformation:eu-west-1:123456789012:stack/mediator/1",
			ResourceProperties: map[string]any{"ServiceToken": "arn:aws:lambda:eu-west-1:123456789012:function:migrate", "CodeVersion": "1"},
		}
		if kind == cfn.RequestDelete {
			ev.PhysicalResourceID = upkeep.SchemaResourceID
		}
		b, _ := json.Marshal(ev)
		if out, err := f.Invoke(ctx, b); err != nil {
			t.Fatalf("%s: %s %v\n%s", kind, out, err, f.Log())
		}
		// The PUT was answered before the function returned.
		var resp cfn.Response
		select {
		case resp = <-answers:
		default:
			t.Fatalf("%s: nothing was PUT to the response URL\n%s", kind, f.Log())
		}
		want := cfn.StatusFailed
		if kind == cfn.RequestDelete {
			want = cfn.StatusSuccess
		}
		if resp.Status != want || resp.RequestID != ev.RequestID || resp.PhysicalResourceID != upkeep.SchemaResourceID ||
			(want == cfn.StatusFailed && !strings.Contains(resp.Reason, "LEASE_TTL_SECONDS")) {
			t.Fatalf("%s answered %+v", kind, resp)
		}
	}
	if len(answers) != 0 {
		t.Fatalf("%d answers more than the events", len(answers))
	}
}

// staticArm64 checks that a bootstrap is what provided.al2023 on arm64 runs: a 64-bit arm64
// ELF executable with no dynamic loader to find.
func staticArm64(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_AARCH64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("%s is a %v %v %v, not a 64-bit arm64 executable", path, f.Class, f.Machine, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
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

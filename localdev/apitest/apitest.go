// Package apitest drives Mediator's real handlers the way API Gateway does, for tests: every
// call is an events.APIGatewayV2HTTPRequest built by the local gateway's converter, with the
// principal in the authorizer context, sent to the handler of the function that owns the
// route, over a store on a database of the test's own. Every answer is checked against the
// OpenAPI document (contract.go): an exchange it does not describe fails the test. The store
// logs in as the application role, as every serving function does, so every handler test also
// proves the role's grants suffice; the test's own reads and writes around the handlers
// (Exec, Count) go as the migrator, the schema's owner. Steps' logs go to a local S3 of the
// test's own (localdev/s3), reached through the real SDK client and presigner as a function
// reaches S3.
package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"mediator/localdev/gateway"
	"mediator/localdev/mqtt"
	locals3 "mediator/localdev/s3"
	"mediator/localdev/testdb"
	"mediator/shared/auth"
	"mediator/shared/config"
	"mediator/shared/httpapi"
	"mediator/shared/publish"
	"mediator/shared/push"
	"mediator/shared/startup"
	"mediator/shared/steplogs"
	"mediator/shared/store"
	"mediator/shared/upkeep"
	"mediator/shared/wire"
)

// Principals for tests.
var (
	Admin  = auth.Principal{Kind: auth.Admin, ID: "ops"}
	Nobody = auth.Principal{}
)

// Client is a client principal.
func Client(id string) auth.Principal { return auth.Principal{Kind: auth.Client, ID: id} }

// Node is the principal of node id.
func Node(id string) auth.Principal { return auth.Principal{Kind: auth.Node, ID: id} }

// LogBucket is the bucket of every test's local S3.
const LogBucket = "mediator-logs"

// Env is a test's whole Mediator: configuration, store, handlers.
type Env struct {
	T         testing.TB
	Config    config.Config
	Store     *store.Store
	Deps      startup.Deps
	Functions map[string]httpapi.Handler
	// S3 is the local S3 that keeps the steps' logs (nil with NoLogBucket).
	S3 *locals3.Server
	// Broker and DataPlane play IoT Core with the Push option (nil without).
	Broker    *mqtt.Broker
	DataPlane *mqtt.DataPlane
	gw        *gateway.Gateway
	database  string        // the URL of the test's database, as the migrator, without the session's settings
	owner     *pgxpool.Pool // the test's database as the migrator: Exec, Count and the like
}

// Option changes how the test's Mediator is built.
type Option func(*options)

type options struct {
	configure []func(*config.Config)
	database  string // a database already made for the test; "" for a fresh one
	session   []string
	tracer    pgx.QueryTracer
	publisher func(*store.Store, *slog.Logger) *publish.Publisher
	noLogs    bool
	s3Clock   func() time.Time
	s3Front   func(string) string
	push      bool
}

// Configure changes the configuration before the store is opened.
func Configure(fn func(*config.Config)) Option {
	return func(o *options) { o.configure = append(o.configure, fn) }
}

// PoolSize sets how many connections the test's store may open (concurrency tests want many).
func PoolSize(n int32) Option { return Configure(func(c *config.Config) { c.Database.MaxConns = n }) }

// Tracer makes the store's pool report every statement to t.
func Tracer(t pgx.QueryTracer) Option { return func(o *options) { o.tracer = t } }

// Publisher gives the handlers a run events' publisher, built on the test's store, and turns
// the event outbox on.
func Publisher(fn func(*store.Store, *slog.Logger) *publish.Publisher) Option {
	return func(o *options) { o.publisher = fn }
}

// NoLogBucket builds a stack that keeps no step logs (LOG_BUCKET empty).
func NoLogBucket() Option { return func(o *options) { o.noLogs = true } }

// S3Through puts an endpoint of the test's own in front of the local S3 — a proxy it can cut —
// given the S3's URL and answering the one to use: the functions' client and so every presigned
// URL go through it, as S3 would be reached over a network that can fail.
func S3Through(front func(s3URL string) string) Option { return func(o *options) { o.s3Front = front } }

// Push starts a real mosquitto and IoT's data plane in front of it (localdev/mqtt) for the
// test: the handlers hint through the data plane, and the heartbeat's answer offers the
// broker to the agents.
func Push() Option { return func(o *options) { o.push = true } }

// S3Clock is the local S3's clock, against which it judges presigned URLs' expiry.
func S3Clock(now func() time.Time) Option { return func(o *options) { o.s3Clock = now } }

// New opens a store on a fresh database and builds every handler on it.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.database == "" {
		o.database = testdb.URL(t)
	}
	url, err := withSession(testdb.App(o.database), o.session)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(name string) string {
		if name == "DATABASE_URL" {
			return url
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database.MaxConns = 4
	for _, fn := range o.configure {
		fn(&cfg)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("APITEST_LOG") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := startup.OpenStore(ctx, cfg, "apitest", log, o.tracer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	owner, err := pgxpool.New(ctx, o.database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	d := startup.Deps{Store: st, Config: cfg, Log: log}
	var s3 *locals3.Server
	if !o.noLogs {
		if s3, err = locals3.Start(context.Background(), locals3.Options{Buckets: []string{LogBucket}, Now: o.s3Clock}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s3.Close() })
		cfg.Logs.Bucket = LogBucket
		d.Config = cfg
		endpoint := s3.URL()
		if o.s3Front != nil {
			endpoint = o.s3Front(endpoint)
		}
		d.Logs = steplogs.New(steplogs.NewClient(aws.Config{
			Region: s3.Region(), Credentials: s3.Credentials(), BaseEndpoint: aws.String(endpoint),
		}), cfg.Logs)
	}
	if o.publisher != nil {
		d.Publisher = o.publisher(st, log)
		if err := st.SetPublishing(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	var broker *mqtt.Broker
	var dataPlane *mqtt.DataPlane
	if o.push {
		if broker, err = mqtt.Start(context.Background(), t.TempDir()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(broker.Stop)
		if dataPlane, err = mqtt.ServeDataPlane(broker); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dataPlane.Close)
		cfg.Push = config.Push{DataEndpoint: dataPlane.URL(), URL: broker.URL()}
		d.Config = cfg
		if d.Hinter, err = push.New(dataPlane.URL(), locals3.DefaultRegion,
			credentials.NewStaticCredentialsProvider(locals3.DefaultAccessKeyID, locals3.DefaultSecretAccessKey, ""), log); err != nil {
			t.Fatal(err)
		}
	}
	fns := httpapi.Functions(d)
	return &Env{T: t, Config: cfg, Store: st, Deps: d, Functions: fns, S3: s3, Broker: broker, DataPlane: dataPlane,
		gw: &gateway.Gateway{Routes: httpapi.Routes, Functions: fns}, database: o.database, owner: owner}
}

// Response is a handler's answer.
type Response struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// Decode unmarshals the body into v, failing the test if it is not JSON.
func (r Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response body is not JSON (%v): %s", err, r.Body)
	}
}

func (r Response) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

// Event builds the event API Gateway would send for this request, as who.
func (e *Env) Event(who auth.Principal, method, target string, body any) (events.APIGatewayV2HTTPRequest, httpapi.Route) {
	e.T.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			e.T.Fatal(err)
		}
	}
	ev, route, err := e.gw.Request(who, method, target, raw)
	if err != nil {
		e.T.Fatal(err)
	}
	return ev, route
}

// Serve puts the env's handlers behind the local gateway on a loopback port until the test
// ends, as `make dev` serves them, and returns its URL: what the CLI, the agent and the client
// are tested against as processes or over HTTP. front, when given, stands in the way of every
// request, to play the network's part.
func (e *Env) Serve(front ...func(http.Handler) http.Handler) string {
	return e.serve(nil, front)
}

// ServeJWT is Serve with the people's routes behind a JWT authorizer, as `make dev AUTH=jwt`
// serves them: the nodes' routes keep the development tokens.
func (e *Env) ServeJWT(jwt *gateway.JWTAuthorizer, front ...func(http.Handler) http.Handler) string {
	return e.serve(jwt, front)
}

func (e *Env) serve(jwt *gateway.JWTAuthorizer, front []func(http.Handler) http.Handler) string {
	var h http.Handler = &gateway.Gateway{
		Routes: httpapi.Routes, Functions: e.Functions, Tokens: gateway.DevTokens(), JWT: jwt,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, f := range front {
		h = f(h)
	}
	srv := httptest.NewServer(h)
	e.T.Cleanup(srv.Close)
	if e.S3 != nil { // the console, served here, reads steps' logs from the local S3
		e.S3.AllowOrigin(srv.URL)
	}
	return srv.URL
}

// Do sends a request to the function that owns the route and returns its answer.
func (e *Env) Do(who auth.Principal, method, target string, body any) Response {
	e.T.Helper()
	ev, route := e.Event(who, method, target, body)
	return e.Invoke(route.Function, ev)
}

// DoWith sends a request to the function that owns the route, built from d instead of the
// test's own Deps (a handler without a publisher, say), and returns its answer.
func (e *Env) DoWith(d startup.Deps, who auth.Principal, method, target string, body any) Response {
	e.T.Helper()
	ev, route := e.Event(who, method, target, body)
	return e.invoke(httpapi.Functions(d), route.Function, ev)
}

// Invoke sends an event to one function's handler, and checks the exchange against the
// OpenAPI document.
func (e *Env) Invoke(function string, ev events.APIGatewayV2HTTPRequest) Response {
	e.T.Helper()
	return e.invoke(e.Functions, function, ev)
}

func (e *Env) invoke(fns map[string]httpapi.Handler, function string, ev events.APIGatewayV2HTTPRequest) Response {
	e.T.Helper()
	resp, err := fns[function](context.Background(), ev)
	if err != nil {
		e.T.Fatalf("%s returned an error instead of a response: %v", function, err)
	}
	e.CheckContract(ev, resp)
	return Response{Status: resp.StatusCode, Headers: resp.Headers, Body: []byte(resp.Body)}
}

// CheckContract fails the test for everything the OpenAPI document says is wrong with an
// exchange (Contract.Check); Invoke calls it on every answer.
func (e *Env) CheckContract(ev events.APIGatewayV2HTTPRequest, resp events.APIGatewayV2HTTPResponse) {
	e.T.Helper()
	c, err := TheContract()
	if err != nil {
		e.T.Fatalf("the OpenAPI document: %v", err)
	}
	for _, f := range c.CheckWith(e.Config.Auth, ev, resp) {
		e.T.Errorf("%s %s answered %d, not as the OpenAPI document says: %s", ev.RequestContext.HTTP.Method, ev.RawPath, resp.StatusCode, f)
	}
}

// Reap invokes the reap function with an EventBridge scheduled event.
func (e *Env) Reap() store.ReapSummary {
	e.T.Helper()
	sum, err := upkeep.Reap(e.Deps)(context.Background(), upkeep.ScheduledEvent("test"))
	if err != nil {
		e.T.Fatalf("reap: %v", err)
	}
	return sum
}

// Exec runs SQL directly, as the migrator: tests use it to move time (write expires_at in the
// past), to check invariants and to analyze, never to set up what a handler could.
func (e *Env) Exec(sql string, args ...any) {
	e.T.Helper()
	if _, err := e.owner.Exec(context.Background(), sql, args...); err != nil {
		e.T.Fatalf("exec %q: %v", sql, err)
	}
}

// Count runs a SELECT count(*)-shaped query.
func (e *Env) Count(sql string, args ...any) int {
	e.T.Helper()
	var n int
	if err := e.owner.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.T.Fatalf("count %q: %v", sql, err)
	}
	return n
}

// Heartbeat advertises a node through the store (labels sorted by the caller).
func (e *Env) Heartbeat(nodeID, bootID string, draining bool, labels ...string) store.HeartbeatResult {
	e.T.Helper()
	res, err := e.Store.Heartbeat(context.Background(), wire.Heartbeat{
		NodeID: nodeID, BootID: bootID, Labels: append([]string{}, labels...), Draining: draining,
	})
	if err != nil {
		e.T.Fatalf("heartbeat %s: %v", nodeID, err)
	}
	return res
}

// NewRun is a one-role run ("main") with one step, needing labels.
func NewRun(id string, needs ...string) wire.NewRun {
	return wire.NewRun{
		RunID: id, Owner: "client:t", RequestHash: []byte(id), MaxAttempts: 1, Priority: wire.DefaultPriority,
		Roles:    []wire.NewRole{{Name: "main", Needs: append([]string{}, needs...)}},
		Steps:    []wire.NewStep{{ID: "s1", Role: "main", After: []string{}, Spec: []byte(`{}`)}},
		Metadata: []byte(`{}`),
	}
}

// Submit stores a run through the store, failing the test on error.
func (e *Env) Submit(run wire.NewRun) store.SubmitResult {
	e.T.Helper()
	res, err := e.Store.Submit(context.Background(), run)
	if err != nil {
		e.T.Fatalf("submit %s: %v", run.RunID, err)
	}
	return res
}

// Wake runs WakeQueued, failing the test on error.
func (e *Env) Wake() store.WakeResult {
	e.T.Helper()
	res, err := e.Store.WakeQueued(context.Background(), store.WakeParams{})
	if err != nil {
		e.T.Fatalf("wake: %v", err)
	}
	return res
}

// State is a run's state, read directly.
func (e *Env) State(runID string) string {
	e.T.Helper()
	var state string
	if err := e.owner.QueryRow(context.Background(), `SELECT state FROM runs WHERE run_id = $1`, runID).Scan(&state); err != nil {
		e.T.Fatalf("state of %s: %v", runID, err)
	}
	return state
}

// Beat is a node's heartbeat through the nodes handler, as the node itself.
func (e *Env) Beat(nodeID, bootID string, draining bool, labels ...string) (Response, Beat) {
	e.T.Helper()
	if labels == nil {
		labels = []string{}
	}
	resp := e.Do(Node(nodeID), "PUT", "/v1/nodes/"+nodeID, map[string]any{"boot_id": bootID, "labels": labels, "draining": draining})
	var b Beat
	if resp.Status == 200 {
		resp.Decode(e.T, &b)
	}
	return resp, b
}

// Beat is a heartbeat's answer.
type Beat struct {
	Node                 store.Node       `json:"node"`
	Lease                *store.HeldLease `json:"lease"`
	Steps                []store.NodeStep `json:"steps"`
	NextHeartbeatSeconds int              `json:"next_heartbeat_seconds"`
}

// Report sends a step report as the node, under the lease it holds: a final one with exit
// code 0, a started one with none (the step has not exited).
func (e *Env) Report(node, boot string, epoch int64, runID, stepID, status string) Response {
	e.T.Helper()
	report := map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": status}
	if status != wire.ReportStarted {
		report["exit_code"] = 0
	}
	return e.Do(Node(node), "POST", "/v1/runs/"+runID+"/steps/"+stepID+"/result", report)
}

// Epoch is the epoch of the lease a node holds (0 for none).
func (e *Env) Epoch(node string) int64 {
	e.T.Helper()
	var epoch int64
	_ = e.owner.QueryRow(context.Background(), `SELECT epoch FROM leases WHERE node_id = $1`, node).Scan(&epoch)
	return epoch
}

// Finish runs every runnable step of runID that the node holds to the status given, through
// the result handler, until the node has nothing of that run left to run.
func (e *Env) Finish(node, boot, runID, status string) {
	e.T.Helper()
	for range 100 {
		_, beat := e.Beat(node, boot, false, e.labels(node)...)
		ran := false
		for _, st := range beat.Steps {
			if !st.Runnable || st.RunID != runID {
				continue
			}
			if r := e.Report(node, boot, beat.Lease.Epoch, st.RunID, st.StepID, wire.ReportStarted); r.Status != 200 {
				e.T.Fatalf("%s started %s: %s", node, st.StepID, r)
			}
			if r := e.Report(node, boot, beat.Lease.Epoch, st.RunID, st.StepID, status); r.Status != 200 {
				e.T.Fatalf("%s %s %s: %s", node, status, st.StepID, r)
			}
			ran = true
		}
		if !ran {
			return
		}
	}
}

func (e *Env) labels(node string) []string {
	var labels []string
	_ = e.owner.QueryRow(context.Background(), `SELECT labels FROM nodes WHERE node_id = $1`, node).Scan(&labels)
	// The server's own label is not the node's to advertise.
	return slices.DeleteFunc(labels, wire.ImplicitLabel)
}

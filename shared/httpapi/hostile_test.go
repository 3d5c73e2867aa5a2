package httpapi_test

// A catalogue of hostile requests over every route. Each case is refused with the right status
// and problem code, in an RFC 9457 body that says nothing about how Mediator is built, and
// leaves the database exactly as it found it.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/store"
)

// hostileCase is one request that must be refused.
type hostileCase struct {
	name   string
	who    auth.Principal
	method string
	target string
	body   any                                   // nil, string, []byte, or a value to marshal
	tamper func(*events.APIGatewayV2HTTPRequest) // changes the event API Gateway would send
	status int
	code   string
	path   string // for a 400: a path some problem must be at ("" to not check)
	says   string // what the problem must say (the rule broken, what to send), "" to not check
}

// Tables a request could write to.
var stateTables = []string{"runs", "run_roles", "steps", "nodes", "leases", "run_events", "step_logs", "node_history", "health_checks"}

// snapshot is every table's row count and a digest of its rows: a hostile request that
// changed a row without adding one (a heartbeat rewriting labels, a renewed lease) shows too.
func snapshot(t *testing.T, env *apitest.Env) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range stateTables {
		var n int
		var digest string
		err := env.Store.Pool().QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM %s t`, table)).Scan(&n, &digest)
		if err != nil {
			t.Fatalf("snapshot %s: %v", table, err)
		}
		out[table] = fmt.Sprintf("%d rows, digest %s", n, digest)
	}
	return out
}

// What an error body must never carry (compared lower-cased): SQL, PostgreSQL's and pgx's
// vocabulary, constraint names, stacks and file paths.
var leaks = []string{"select ", "insert ", "update ", "delete ", "sqlstate", "pgx", "pgconn", "constraint",
	"_pkey", "_fkey", "violates", "goroutine", ".go:", "/work/", "/root/", "panic", "runtime error"}

type problemBody struct {
	Type      string           `json:"type"`
	Title     string           `json:"title"`
	Status    int              `json:"status"`
	Detail    string           `json:"detail"`
	Code      string           `json:"code"`
	RequestID string           `json:"request_id"`
	Errors    []map[string]any `json:"errors"`
}

// Event tampering.

func withBase64(raw []byte) func(*events.APIGatewayV2HTTPRequest) {
	return withRawBase64(base64.StdEncoding.EncodeToString(raw))
}

func withRawBase64(s string) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.Body, ev.IsBase64Encoded = s, true }
}

// withRawBody puts bytes in the event's body as they are, not base64-encoded: the event's
// body is a Go string, which carries any bytes.
func withRawBody(raw string) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.Body, ev.IsBase64Encoded = raw, false }
}

func withContentType(ct string) func(*events.APIGatewayV2HTTPRequest) {
	return withHeader("content-type", ct)
}

// withHeader sets a header as API Gateway passes it on (payload 2.0: names lower-cased).
func withHeader(name, value string) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.Headers[name] = value }
}

// gzipped is body compressed, as a client that gzips its requests sends it, API Gateway
// base64-encoding what is not text.
func gzipped(t *testing.T, body string) func(*events.APIGatewayV2HTTPRequest) {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(body)); err != nil || w.Close() != nil {
		t.Fatalf("gzip: %v", err)
	}
	raw := withBase64(b.Bytes())
	return func(ev *events.APIGatewayV2HTTPRequest) { raw(ev); ev.Headers["content-encoding"] = "gzip" }
}

// withPathParam puts a value in a path parameter that no URL the local gateway parses would
// give (API Gateway decodes %2F, so `../` can arrive inside one segment).
func withPathParam(name, value string) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.PathParameters[name] = value }
}

func withRouteKey(key string) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.RouteKey, ev.RequestContext.RouteKey = key, key }
}

func withAuthorizer(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) func(*events.APIGatewayV2HTTPRequest) {
	return func(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.Authorizer = a }
}

func lambdaAuthorizer(kind, id any) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": kind, "id": id}}
}

func cursor(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// jsonList is `[item(0), item(1), ...]` with n items.
func jsonList(n int, item func(i int) string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item(i))
	}
	b.WriteByte(']')
	return b.String()
}

// padTo pads a JSON text with spaces before its last byte to exactly n bytes.
func padTo(n int, doc string) string {
	return doc[:len(doc)-1] + strings.Repeat(" ", n-len(doc)) + doc[len(doc)-1:]
}

func TestHostileCatalogue(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	limit := env.Config.MaxBodyBytes
	if limit != 262144 {
		t.Fatalf("MAX_BODY_BYTES is %d; the oversized cases are built for 262144", limit)
	}
	bob, mallory, nodeA, nodeB := apitest.Client("bob"), apitest.Client("mallory"), apitest.Node("A"), apitest.Node("B")

	// Legitimate state to attack, built through the handlers: A runs alice's "held" (flash,
	// then test) and has started flash; B runs bob's "bobs"; "waiting" queues behind held; "gone"
	// failed at once (no GPU in the fleet).
	env.Beat("A", "a1", false, "board=rpi4")
	env.Beat("B", "b1", false, "lab=2")
	for _, f := range []struct {
		who    auth.Principal
		body   any
		status int
	}{
		{alice, map[string]any{"run_id": "held", "needs": []string{"board=rpi4"}, "metadata": map[string]any{"team": "qa"},
			"steps": []map[string]any{{"id": "flash", "spec": map[string]any{"cmd": "flash.sh"}}, {"id": "test", "after": []string{"flash"}}}}, 201},
		{bob, oneNodeRun("bobs", "lab=2"), 201},
		{alice, oneNodeRun("waiting", "board=rpi4"), 202},
		{alice, oneNodeRun("gone", "gpu"), 422},
	} {
		if resp := env.Do(f.who, "POST", "/v1/runs", f.body); resp.Status != f.status {
			t.Fatalf("fixture: %s", resp)
		}
	}
	epochA, epochB := env.Epoch("A"), env.Epoch("B")
	if epochA == 0 || epochB == 0 {
		t.Fatalf("fixture: A holds epoch %d, B %d", epochA, epochB)
	}
	if resp := env.Report("A", "a1", epochA, "held", "flash", "started"); resp.Status != 200 {
		t.Fatalf("fixture: A starts flash: %s", resp)
	}
	if resp := env.Do(apitest.Nobody, "GET", "/healthz", nil); resp.Status != 200 {
		t.Fatalf("GET /healthz needs no principal: %s", resp)
	}

	report := func(node string, boot string, epoch int64, status string) map[string]any {
		return map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": status}
	}
	okRun := `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}]}`
	// steps is a submit body with the steps given, to break the graph.
	steps := func(list string) string { return `{"run_id":"new-1","needs":["board=rpi4"],"steps":` + list + `}` }
	long := strings.Repeat("x", 200)
	oversized := `{"run_id":"` + strings.Repeat("x", limit) + `"}`

	var cases []hostileCase
	add := func(cs ...hostileCase) { cases = append(cases, cs...) }

	// --- Who may call: no principal, a principal the authorizer could not have made, the
	// wrong kind of principal, a node acting as another.
	for _, r := range []struct{ method, target string }{
		{"POST", "/v1/runs"}, {"GET", "/v1/runs"}, {"GET", "/v1/runs/held"}, {"POST", "/v1/runs/held/cancel"},
		{"POST", "/v1/runs/held/steps/test/result"}, {"PUT", "/v1/nodes/A"}, {"DELETE", "/v1/nodes/A"},
		{"GET", "/v1/nodes"}, {"GET", "/v1/leases"}, {"GET", "/v1/queue"},
		{"POST", "/v1/runs/held/steps/flash/log-urls"}, {"GET", "/v1/runs/held/steps/flash/log"},
		{"POST", "/v1/nodes/A/quarantine"}, {"DELETE", "/v1/nodes/A/quarantine"}, {"GET", "/v1/nodes/A"},
		{"PUT", "/v1/health-checks/usb"}, {"GET", "/v1/health-checks/usb"}, {"DELETE", "/v1/health-checks/usb"}, {"GET", "/v1/health-checks"},
	} {
		add(hostileCase{name: "no principal: " + r.method + " " + r.target, who: apitest.Nobody, method: r.method, target: r.target, status: 401, code: "unauthenticated"})
	}
	add(
		hostileCase{name: "no principal, oversized body: credentials come first", who: apitest.Nobody, method: "POST", target: "/v1/runs", body: oversized, status: 401, code: "unauthenticated"},
		hostileCase{name: "authorizer with an unknown kind", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(lambdaAuthorizer("root", "alice")), status: 401, code: "unauthenticated"},
		hostileCase{name: "authorizer with an id that has spaces", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(lambdaAuthorizer("client", "alice smith")), status: 401, code: "unauthenticated"},
		hostileCase{name: "authorizer with an empty id", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(lambdaAuthorizer("admin", "")), status: 401, code: "unauthenticated"},
		hostileCase{name: "authorizer with a non-string kind", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(lambdaAuthorizer(1, "alice")), status: 401, code: "unauthenticated"},
		hostileCase{name: "JWT without a kind", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "alice"}}}), status: 401, code: "unauthenticated"},
		hostileCase{name: "empty authorizer", who: alice, method: "GET", target: "/v1/runs", tamper: withAuthorizer(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}), status: 401, code: "unauthenticated"},

		hostileCase{name: "client heartbeats a node", who: alice, method: "PUT", target: "/v1/nodes/A", body: `{"boot_id":"a1"}`, status: 403, code: "forbidden"},
		hostileCase{name: "client removes a node", who: alice, method: "DELETE", target: "/v1/nodes/A", status: 403, code: "forbidden"},
		hostileCase{name: "client lists nodes", who: alice, method: "GET", target: "/v1/nodes", status: 403, code: "forbidden"},
		hostileCase{name: "client lists leases", who: alice, method: "GET", target: "/v1/leases", status: 403, code: "forbidden"},
		hostileCase{name: "client reports a step", who: alice, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 403, code: "forbidden"},
		hostileCase{name: "admin reports a step: only the assigned node may", who: apitest.Admin, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 403, code: "forbidden"},
		hostileCase{name: "node submits a run", who: nodeA, method: "POST", target: "/v1/runs", body: okRun, status: 403, code: "forbidden"},
		hostileCase{name: "node lists runs", who: nodeA, method: "GET", target: "/v1/runs", status: 403, code: "forbidden"},
		hostileCase{name: "node reads the run it runs", who: nodeA, method: "GET", target: "/v1/runs/held", status: 403, code: "forbidden"},
		hostileCase{name: "node cancels the run it runs", who: nodeA, method: "POST", target: "/v1/runs/held/cancel", status: 403, code: "forbidden"},
		hostileCase{name: "node reads the queue", who: nodeA, method: "GET", target: "/v1/queue", status: 403, code: "forbidden"},
		hostileCase{name: "node lists nodes", who: nodeA, method: "GET", target: "/v1/nodes", status: 403, code: "forbidden"},
		hostileCase{name: "node lists leases", who: nodeA, method: "GET", target: "/v1/leases", status: 403, code: "forbidden"},
		hostileCase{name: "node removes itself", who: nodeA, method: "DELETE", target: "/v1/nodes/A", status: 403, code: "forbidden"},
		hostileCase{name: "node B heartbeats as A", who: nodeB, method: "PUT", target: "/v1/nodes/A", body: `{"boot_id":"a1","labels":["board=rpi4"]}`, status: 403, code: "forbidden"},
		hostileCase{name: "node B restarts A (another boot)", who: nodeB, method: "PUT", target: "/v1/nodes/A", body: `{"boot_id":"evil"}`, status: 403, code: "forbidden"},
		hostileCase{name: "node B registers a node that does not exist", who: nodeB, method: "PUT", target: "/v1/nodes/C", body: `{"boot_id":"c1"}`, status: 403, code: "forbidden"},
		hostileCase{name: "node id differing only in case", who: apitest.Node("a"), method: "PUT", target: "/v1/nodes/A", body: `{"boot_id":"a1"}`, status: 403, code: "forbidden"},
	)

	// --- Runs that are not yours, runs that do not exist (404), ids that could never exist (400
	// at the path parameter: the client has a malformed id to fix, not a run to look for).
	add(
		hostileCase{name: "another client's run", who: alice, method: "GET", target: "/v1/runs/bobs", status: 404, code: "not_found"},
		hostileCase{name: "cancel another client's running run", who: alice, method: "POST", target: "/v1/runs/bobs/cancel", status: 404, code: "not_found"},
		hostileCase{name: "cancel another client's queued run", who: mallory, method: "POST", target: "/v1/runs/waiting/cancel", body: `{"reason":"mine now"}`, status: 404, code: "not_found"},
		hostileCase{name: "cancel another client's finished run: 404, not 409", who: mallory, method: "POST", target: "/v1/runs/gone/cancel", status: 404, code: "not_found"},
		hostileCase{name: "client forces a cancel", who: alice, method: "POST", target: "/v1/runs/held/cancel", body: `{"force":true}`, status: 403, code: "forbidden"},
		hostileCase{name: "cancel a finished run", who: alice, method: "POST", target: "/v1/runs/gone/cancel", status: 409, code: "run_not_live"},
		hostileCase{name: "unknown run", who: alice, method: "GET", target: "/v1/runs/nope", status: 404, code: "not_found"},
		hostileCase{name: "cancel an unknown run", who: alice, method: "POST", target: "/v1/runs/nope/cancel", status: 404, code: "not_found"},
		hostileCase{name: "admin removes an unknown node", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/nope", status: 404, code: "not_found"},
		hostileCase{name: "run id of 200 characters", who: alice, method: "GET", target: "/v1/runs/" + long, status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id with a leading dash", who: alice, method: "GET", target: "/v1/runs/-held", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id with a space", who: alice, method: "GET", target: "/v1/runs/held%20x", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id with a NUL", who: alice, method: "GET", target: "/v1/runs/held%00", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id that is a literal %00", who: alice, method: "GET", target: "/v1/runs/held", tamper: withPathParam("run_id", "%00"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id in unicode", who: alice, method: "GET", target: "/v1/runs/%C3%A9t%C3%A9", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id ../", who: alice, method: "GET", target: "/v1/runs/held", tamper: withPathParam("run_id", "../runs"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id that is SQL", who: alice, method: "GET", target: "/v1/runs/held", tamper: withPathParam("run_id", "'; DROP TABLE runs;--"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id with a trailing newline", who: alice, method: "GET", target: "/v1/runs/held", tamper: withPathParam("run_id", "held\n"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id with a control character", who: alice, method: "GET", target: "/v1/runs/held", tamper: withPathParam("run_id", "held\x01"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "run id missing from the event", who: alice, method: "GET", target: "/v1/runs/held", tamper: func(ev *events.APIGatewayV2HTTPRequest) { ev.PathParameters = nil }, status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "cancel a run id ../", who: alice, method: "POST", target: "/v1/runs/held/cancel", tamper: withPathParam("run_id", "../held"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "cancel a run id of 200 characters", who: alice, method: "POST", target: "/v1/runs/" + long + "/cancel", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "heartbeat a node id of 200 characters", who: apitest.Admin, method: "PUT", target: "/v1/nodes/" + long, body: `{"boot_id":"b"}`, status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "heartbeat a node id with a leading dash", who: apitest.Admin, method: "PUT", target: "/v1/nodes/-A", body: `{"boot_id":"b"}`, status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "heartbeat a node id in unicode", who: apitest.Admin, method: "PUT", target: "/v1/nodes/n%C3%B6de", body: `{"boot_id":"b"}`, status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "remove a node id ../", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/A", tamper: withPathParam("node_id", "../A"), status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "remove a node id with a NUL", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/A%00", status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "report on an unknown run", who: nodeA, method: "POST", target: "/v1/runs/nope/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 404, code: "not_found"},
		hostileCase{name: "report on an unknown step", who: nodeA, method: "POST", target: "/v1/runs/held/steps/nope/result", body: report("A", "a1", epochA, "succeeded"), status: 404, code: "not_found"},
		hostileCase{name: "report on a step id with a leading dash", who: nodeA, method: "POST", target: "/v1/runs/held/steps/-flash/result", body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "step_id"},
		hostileCase{name: "report on a step id ../", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", tamper: withPathParam("step_id", "../flash"), body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "step_id"},
		hostileCase{name: "report on a step id with a colon (legal in run ids, not step ids)", who: nodeA, method: "POST", target: "/v1/runs/held/steps/a:b/result", body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "step_id"},
		hostileCase{name: "report on a run id of 200 characters", who: nodeA, method: "POST", target: "/v1/runs/" + long + "/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "report on an empty step id", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", tamper: withPathParam("step_id", ""), body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "step_id"},
		hostileCase{name: "report on a run id with a space", who: nodeA, method: "POST", target: "/v1/runs/held%20x/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "remove a node id missing from the event", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/A", tamper: func(ev *events.APIGatewayV2HTTPRequest) { ev.PathParameters = nil }, status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "heartbeat a node id that is SQL", who: apitest.Admin, method: "PUT", target: "/v1/nodes/A", tamper: withPathParam("node_id", "A' OR '1'='1"), body: `{"boot_id":"a1"}`, status: 400, code: "invalid_request", path: "node_id"},
		hostileCase{name: "cancel a run id in unicode", who: alice, method: "POST", target: "/v1/runs/%C3%A9t%C3%A9/cancel", status: 400, code: "invalid_request", path: "run_id"},
		hostileCase{name: "a route this function does not serve", who: alice, method: "POST", target: "/v1/runs", body: okRun, tamper: withRouteKey("PATCH /v1/runs"), status: 404, code: "not_found"},
		hostileCase{name: "another function's route", who: apitest.Admin, method: "POST", target: "/v1/runs", body: okRun, tamper: withRouteKey("GET /v1/nodes"), status: 404, code: "not_found"},
		hostileCase{name: "no route key at all", who: alice, method: "GET", target: "/v1/runs", tamper: withRouteKey(""), status: 404, code: "not_found"},
	)

	// --- Steps that are not yours to report: fenced by node, boot, epoch, and order.
	add(
		hostileCase{name: "node B reports A's step as itself", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("B", "b1", epochB, "succeeded"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node B reports A's step under A's epoch", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("B", "b1", epochA, "succeeded"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node B reports A's step in A's name", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA, "succeeded"), status: 403, code: "forbidden"},
		// The store's "same report again" answer is the reporting node's alone: matched on the
		// step's epoch, state and exit code only, any node repeating the assigned node's last
		// report would get 200 and learn the run's and the step's state.
		hostileCase{name: "node B repeats A's report under A's epoch", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("B", "b1", epochA, "started"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node A reports with another boot", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "old-boot", epochA, "succeeded"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node A reports under an old epoch", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA+1000, "succeeded"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node A reports on a run it does not hold", who: nodeA, method: "POST", target: "/v1/runs/bobs/steps/s1/result", body: report("A", "a1", epochA, "started"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node A reports on a finished run", who: nodeA, method: "POST", target: "/v1/runs/gone/steps/s1/result", body: report("A", "a1", epochA, "started"), status: 409, code: "stale_assignment"},
		hostileCase{name: "node A starts a step before its after", who: nodeA, method: "POST", target: "/v1/runs/held/steps/test/result", body: report("A", "a1", epochA, "started"), status: 409, code: "not_runnable"},
		hostileCase{name: "node A finishes a step it never started", who: nodeA, method: "POST", target: "/v1/runs/held/steps/test/result", body: report("A", "a1", epochA, "succeeded"), status: 409, code: "not_runnable"},
		hostileCase{name: "node A reports under an epoch newer than its lease", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA+1, "started"), status: 409, code: "stale_assignment"},
		// An empty status is malformed: let through, the store would write the step's state as
		// '', steps_state_valid would refuse it, and the node would get 500, not 400.
		hostileCase{name: "node A reports an empty status", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: report("A", "a1", epochA, ""), status: 400, code: "invalid_request", path: "status"},
	)

	// --- Query parameters.
	for _, q := range []string{"limit=0", "limit=101", "limit=-1", "limit=abc", "limit=1e2", "limit=", "limit=99999999999999999999",
		"limit=%201", "state=running", "state=READY", "state=QUEUED%00", "state=%27%3B%20DROP%20TABLE%20runs%3B--", "state=QUEUED&state=RUNNING",
		"after=not*a*cursor", "after=" + cursor("no-colon"), "after=" + cursor("x:held"), "after=" + cursor("1:bad id"), "after=" + cursor("1:"),
		"limit=0&state=nope&after=!!"} {
		param, _, _ := strings.Cut(q, "=")
		add(hostileCase{name: "GET /v1/runs?" + q, who: alice, method: "GET", target: "/v1/runs?" + q, status: 400, code: "invalid_request", path: param})
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=abc", "limit=1e2", "limit=%201", "limit=1&limit=2",
		"after=not*a*cursor", "after=" + base64.RawURLEncoding.EncodeToString([]byte("bad id")), "after=%27%3B%20DROP%20TABLE%20nodes%3B--"} {
		param, _, _ := strings.Cut(q, "=")
		add(hostileCase{name: "GET /v1/nodes?" + q, who: apitest.Admin, method: "GET", target: "/v1/nodes?" + q, status: 400, code: "invalid_request", path: param})
	}
	add(
		// A cursor's microseconds are bounded: any int64 would overflow ListRuns' `timestamptz
		// 'epoch' + @after_us * interval '1 microsecond'` in PostgreSQL, a 500.
		hostileCase{name: "cursor with the largest microseconds", who: alice, method: "GET", target: "/v1/runs?after=" + cursor("9223372036854775807:held"), status: 400, code: "invalid_request", path: "after"},
		hostileCase{name: "cursor with the smallest microseconds", who: alice, method: "GET", target: "/v1/runs?after=" + cursor("-9223372036854775808:held"), status: 400, code: "invalid_request", path: "after"},
		hostileCase{name: "dry_run=yes", who: alice, method: "POST", target: "/v1/runs?dry_run=yes", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "dry_run twice", who: alice, method: "POST", target: "/v1/runs?dry_run=true&dry_run=false", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "dry_run twice, the same", who: alice, method: "POST", target: "/v1/runs?dry_run=true&dry_run=true", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "limit twice", who: alice, method: "GET", target: "/v1/runs?limit=1&limit=2", status: 400, code: "invalid_request", path: "limit"},
		hostileCase{name: "after twice", who: alice, method: "GET", target: "/v1/runs?after=" + cursor("1:held") + "&after=" + cursor("2:held"), status: 400, code: "invalid_request", path: "after"},
		// The query string is read as written: API Gateway's decoded map has no entry for a
		// pair that does not decode, so read from it ?dry_run=%74rue% would store a real run
		// and ?state=%ZZ list every state.
		hostileCase{name: "dry_run with a broken escape", who: alice, method: "POST", target: "/v1/runs?dry_run=%74rue%", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "dry_run with a bad escape", who: alice, method: "POST", target: "/v1/runs?dry_run=%zz", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "dry_run with a semicolon", who: alice, method: "POST", target: "/v1/runs?dry_run=true;x=1", body: okRun, status: 400, code: "invalid_request", path: "dry_run"},
		hostileCase{name: "a parameter name with a bad escape", who: alice, method: "POST", target: "/v1/runs?%ZZ=true", body: okRun, status: 400, code: "invalid_request"},
		hostileCase{name: "state with a bad escape", who: alice, method: "GET", target: "/v1/runs?state=%ZZ", status: 400, code: "invalid_request", path: "state"},
		hostileCase{name: "state with a broken escape after a good parameter", who: alice, method: "GET", target: "/v1/runs?limit=5&state=QUEUED%", status: 400, code: "invalid_request", path: "state"},
		hostileCase{name: "state and limit split by a semicolon", who: alice, method: "GET", target: "/v1/runs?state=QUEUED;limit=1", status: 400, code: "invalid_request", path: "state"},
		hostileCase{name: "a malformed query on a route with no parameters", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/A?%", status: 400, code: "invalid_request"},
	)
	// Parameters no route takes: refused, not ignored (a client's misspelt or guessed
	// parameter does nothing it could believe it did).
	for _, r := range []struct {
		who                   auth.Principal
		method, target, param string
		body                  any
	}{
		{alice, "POST", "/v1/runs?dryrun=true", "dryrun", okRun},
		{alice, "POST", "/v1/runs?dry_run=true&force=1", "force", okRun},
		{alice, "POST", "/v1/runs?Dry_Run=true", "Dry_Run", okRun},
		{alice, "GET", "/v1/runs?owner=bob", "owner", nil},
		{alice, "GET", "/v1/runs?State=QUEUED", "State", nil},
		{alice, "GET", "/v1/runs?limit=5&page=2", "page", nil},
		{alice, "GET", "/v1/runs/held?history=false", "history", nil},
		{alice, "POST", "/v1/runs/held/cancel?force=true", "force", nil},
		{alice, "POST", "/v1/runs/held/cancel?reason=x", "reason", `{"reason":"x"}`},
		{nodeA, "PUT", "/v1/nodes/A?draining=true", "draining", `{"boot_id":"a1","labels":["board=rpi4"]}`},
		{apitest.Admin, "DELETE", "/v1/nodes/A?force=1", "force", nil},
		{nodeA, "POST", "/v1/runs/held/steps/flash/result?status=succeeded", "status", report("A", "a1", epochA, "started")},
		{alice, "GET", "/v1/queue?state=QUEUED", "state", nil},
		{apitest.Admin, "GET", "/v1/nodes?limit=1&state=idle", "state", nil},
		{apitest.Admin, "GET", "/v1/leases?x=", "x", nil},
		{apitest.Nobody, "GET", "/healthz?probe=1", "probe", nil},
	} {
		add(hostileCase{name: "unknown query parameter: " + r.method + " " + r.target, who: r.who, method: r.method, target: r.target, body: r.body, status: 400, code: "invalid_request", path: r.param})
	}

	// --- Bodies, route by route. Each body route is a (principal, target) pair with a body
	// that is acceptable (ok: it would change the fixture), so the hostile variants differ
	// from it in one way.
	bodyRoutes := []struct {
		name   string
		who    auth.Principal
		target string
		ok     string
	}{
		{"submit", alice, "/v1/runs", okRun},
		{"heartbeat", nodeA, "/v1/nodes/A", `{"boot_id":"a1","labels":["board=rpi4"]}`},
		{"result", nodeA, "/v1/runs/held/steps/flash/result", fmt.Sprintf(`{"node_id":"A","boot_id":"a1","epoch":%d,"status":"succeeded"}`, epochA)},
		{"cancel", alice, "/v1/runs/held/cancel", `{"reason":"enough"}`},
	}
	method := map[string]string{"submit": "POST", "heartbeat": "PUT", "result": "POST", "cancel": "POST"}
	for _, r := range bodyRoutes {
		m := method[r.name]
		c := func(name string, body any, tamper func(*events.APIGatewayV2HTTPRequest), status int, code string) {
			add(hostileCase{name: r.name + ": " + name, who: r.who, method: m, target: r.target, body: body, tamper: tamper, status: status, code: code})
		}
		// The acceptable body, declared as something it cannot be read as: refused, saying what
		// to send, rather than read as UTF-8 JSON all the same.
		unread := func(name string, tamper func(*events.APIGatewayV2HTTPRequest)) {
			add(hostileCase{name: r.name + ": " + name, who: r.who, method: m, target: r.target, body: r.ok, tamper: tamper,
				status: 415, code: "unsupported_media_type", says: "send the body as application/json; charset=utf-8, uncompressed"})
		}
		unread("content-encoding gzip on a body that is not compressed", withHeader("content-encoding", "gzip"))
		unread("content-encoding gzip on a gzipped body", gzipped(t, r.ok))
		unread("content-encoding deflate", withHeader("content-encoding", "deflate"))
		unread("content-encoding br", withHeader("content-encoding", "br"))
		unread("content-encoding identity, then gzip", withHeader("content-encoding", "identity, gzip"))
		unread("charset iso-8859-1", withContentType("application/json; charset=iso-8859-1"))
		unread("charset utf-16", withContentType("application/json; charset=utf-16"))
		unread("charset utf8, not utf-8", withContentType("application/json; charset=utf8"))
		unread("a +json media type", withContentType("application/vnd.evil+json"))
		unread("a +json media type in UTF-8", withContentType("application/merge-patch+json; charset=utf-8"))
		unread("content-type text/json", withContentType("text/json"))
		c("oversized body", oversized, nil, 413, "payload_too_large")
		c("one byte over the limit", padTo(limit+1, `{}`), nil, 413, "payload_too_large")
		c("exactly the limit is read (and is malformed)", padTo(limit, `{"x":1,}`), nil, 400, "invalid_request")
		c("base64 body past the limit once decoded", nil, withBase64([]byte(padTo(limit+1, `{}`))), 413, "payload_too_large")
		c("base64 body of a MiB", nil, withBase64([]byte(padTo(1<<20, `{}`))), 413, "payload_too_large")
		c("base64 body decoding to exactly the limit is read", nil, withBase64([]byte(padTo(limit, `{"x":1,}`))), 400, "invalid_request")
		c("invalid base64", nil, withRawBase64("!!not base64!!"), 400, "invalid_request")
		c("base64 without its padding", nil, withRawBase64("e30"), 400, "invalid_request")
		c("base64 of bytes that are not UTF-8", nil, withBase64([]byte("\xff\xfe{}")), 400, "invalid_request")
		c("content-type text/plain", `{}`, withContentType("text/plain"), 415, "unsupported_media_type")
		c("content-type form", `{}`, withContentType("application/x-www-form-urlencoded"), 415, "unsupported_media_type")
		c("content-type multipart", `{}`, withContentType("multipart/form-data; boundary=x"), 415, "unsupported_media_type")
		c("content-type that does not parse", `{}`, withContentType("application/json;;=;"), 415, "unsupported_media_type")
		c("content-type xml", `{}`, withContentType("application/xml"), 415, "unsupported_media_type")
		c("malformed JSON", `{"a":`, nil, 400, "invalid_request")
		c("single quotes", `{'reason':'x'}`, nil, 400, "invalid_request")
		c("bare keys", `{reason:"x"}`, nil, 400, "invalid_request")
		c("trailing comma", `{"reason":"x",}`, nil, 400, "invalid_request")
		c("NaN", `{"epoch":NaN}`, nil, 400, "invalid_request")
		c("trailing object", `{} {}`, nil, 400, "invalid_request")
		c("trailing garbage", `{}garbage`, nil, 400, "invalid_request")
		c("trailing bracket", `{}]`, nil, 400, "invalid_request")
		c("an array, not an object", `[]`, nil, 400, "invalid_request")
		c("null", `null`, nil, 400, "invalid_request")
		c("a string", `"{}"`, nil, 400, "invalid_request")
		c("unknown field", `{"colour":"red"}`, nil, 400, "invalid_request")
		c("field in the wrong case", `{"Reason":"x","Boot_ID":"x","RUN_ID":"x"}`, nil, 400, "invalid_request")
		c("duplicate key", `{"colour":1,"colour":2}`, nil, 400, "invalid_request")
		c("NUL in a key", `{"a\u0000":1}`, nil, 400, "invalid_request")
		c("nested 40 deep", `{"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`, nil, 400, "invalid_request")
		c("nested 50000 deep", `{"x":`+strings.Repeat("[", 50000)+strings.Repeat("]", 50000)+`}`, nil, 400, "invalid_request")
		c("a huge number", `{"x":1e999}`, nil, 400, "invalid_request")
		c("a byte-order mark", "\ufeff{}", nil, 400, "invalid_request")
		if r.name != "cancel" { // an empty cancel body is a plain cancel
			c("empty body", nil, nil, 400, "invalid_request")
			c("only whitespace", " \n\t", nil, 400, "invalid_request")
			c("empty object", `{}`, nil, 400, "invalid_request")
		}
	}

	// --- Submit: fields, patterns, graphs, limits.
	sub := func(name, path, body string) {
		add(hostileCase{name: "submit: " + name, who: alice, method: "POST", target: "/v1/runs", body: body, status: 400, code: "invalid_request", path: path})
	}
	for _, id := range []string{"", "a b", "-lead", ".lead", long, "été", "../etc", "%00", "a\\u0000b", "a\\u0001b", "a\\tb", "a\\nb", "'; DROP TABLE runs;--", "a/b", "a\\\\b", "a\\\"b"} {
		sub(fmt.Sprintf("run_id %q", id), "run_id", `{"run_id":"`+id+`","needs":["board=rpi4"],"steps":[{"id":"s"}]}`)
		sub(fmt.Sprintf("step id %q", id), "steps[0].id", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"`+id+`"}]}`)
		if id != "a/b" { // a label may hold a slash
			sub(fmt.Sprintf("label %q", id), "needs[0]", `{"run_id":"new-1","needs":["`+id+`"],"steps":[{"id":"s"}]}`)
		}
		sub(fmt.Sprintf("role %q", id), "", `{"run_id":"new-1","roles":{"`+id+`":{"needs":[]}},"steps":[{"id":"s","role":"`+id+`"}]}`)
	}
	sub("NUL in a spec value", "steps[0].spec.cmd", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s","spec":{"cmd":"rm\u0000"}}]}`)
	sub("NUL in a spec key", "steps[0].spec", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s","spec":{"c\u0000md":"x"}}]}`)
	sub("NUL in metadata", "metadata.k[0]", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"metadata":{"k":["\u0000"]}}`)
	sub("wrong types", "run_id", `{"run_id":7,"needs":"board=rpi4","steps":{"id":"s"},"max_attempts":"1","timeout_seconds":true,"wait_for_capacity":"yes","metadata":[]}`)
	sub("wrong types in a step", "steps[0].id", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":1,"role":["main"],"after":"a","spec":"x","retries":"2"}]}`)
	sub("a step that is not an object", "steps[0]", `{"run_id":"new-1","needs":["board=rpi4"],"steps":["s"]}`)
	sub("roles as a list", "roles", `{"run_id":"new-1","roles":[{"needs":[]}],"steps":[{"id":"s"}]}`)
	sub("roles and needs", "needs", `{"run_id":"new-1","needs":[],"roles":{"a":{"needs":[]}},"steps":[{"id":"s","role":"a"}]}`)
	sub("no roles, no needs", "roles", `{"run_id":"new-1","steps":[{"id":"s"}]}`)
	sub("no steps", "steps", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[]}`)
	sub("unknown field in a step", "steps[0].cmd", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s","cmd":"x"}]}`)
	sub("unknown field in a role", "roles.a.count", `{"run_id":"new-1","roles":{"a":{"needs":[],"count":2}},"steps":[{"id":"s","role":"a"}]}`)
	sub("duplicate key in a step", "steps[0].id", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s","id":"t"}]}`)
	sub("duplicate key in a spec, escaped", "steps[0].spec.k", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s","spec":{"k":1,"\u006b":2}}]}`)
	sub("duplicate step ids", "steps[1].id", steps(`[{"id":"s"},{"id":"s"}]`))
	sub("a step waits for itself", "steps[0].after[0]", steps(`[{"id":"s","after":["s"]}]`))
	sub("a two-step cycle", "steps[0].after", steps(`[{"id":"a","after":["b"]},{"id":"b","after":["a"]}]`))
	sub("a three-step cycle behind a good step", "steps[1].after", steps(`[{"id":"ok"},{"id":"a","after":["c","ok"]},{"id":"b","after":["a"]},{"id":"c","after":["b"]}]`))
	sub("after names no step", "steps[0].after[0]", steps(`[{"id":"a","after":["ghost"]}]`))
	sub("after names a step twice", "steps[1].after[1]", steps(`[{"id":"a"},{"id":"b","after":["a","a"]}]`))
	sub("a step on no role", "steps[0].role", `{"run_id":"new-1","roles":{"a":{"needs":[]}},"steps":[{"id":"s","role":"b"}]}`)
	sub("a role with no step", "roles.b", `{"run_id":"new-1","roles":{"a":{"needs":[]},"b":{"needs":[]}},"steps":[{"id":"s","role":"a"}]}`)
	sub("65 steps", "steps", steps(jsonList(65, func(i int) string { return fmt.Sprintf(`{"id":"s%d"}`, i) })))
	sub("10,000 steps", "steps", steps(jsonList(10000, func(i int) string { return fmt.Sprintf(`{"id":"s%d"}`, i) })))
	sub("10,000 needs", "needs", `{"run_id":"new-1","needs":`+jsonList(10000, func(i int) string { return fmt.Sprintf(`"l%d"`, i) })+`,"steps":[{"id":"s"}]}`)
	sub("10,000 after", "steps[0].after", steps(`[{"id":"a","after":`+jsonList(10000, func(i int) string { return `"a"` })+`}]`))
	sub("10,000 roles", "roles", `{"run_id":"new-1","roles":{`+strings.Trim(jsonList(10000, func(i int) string { return fmt.Sprintf(`"r%d":{"needs":[]}`, i) }), "[]")+`},"steps":[{"id":"s","role":"r0"}]}`)
	sub("a spec over 64 KiB", "steps[0].spec", steps(`[{"id":"s","spec":{"blob":"`+strings.Repeat("x", 70000)+`"}}]`))
	sub("metadata over 16 KiB", "metadata", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"metadata":{"blob":"`+strings.Repeat("x", 17000)+`"}}`)
	sub("a spec that is a list", "steps[0].spec", steps(`[{"id":"s","spec":[1,2]}]`))
	sub("a spec 40 deep", "", steps(`[{"id":"s","spec":`+strings.Repeat(`{"a":`, 40)+`1`+strings.Repeat(`}`, 40)+`}]`))
	sub("a huge number in a spec", "steps[0].spec.n", steps(`[{"id":"s","spec":{"n":1e999}}]`))
	sub("a huge negative number in a spec", "steps[0].spec.n", steps(`[{"id":"s","spec":{"n":-1e400}}]`))
	sub("max_attempts past int64", "max_attempts", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"max_attempts":99999999999999999999}`)
	sub("max_attempts 0", "max_attempts", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"max_attempts":0}`)
	sub("max_attempts 1.5", "max_attempts", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"max_attempts":1.5}`)
	sub("timeout_seconds negative", "timeout_seconds", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"timeout_seconds":-1}`)
	sub("timeout_seconds past a week", "timeout_seconds", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"timeout_seconds":604801}`)
	sub("queue_timeout_seconds as a string", "queue_timeout_seconds", `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"queue_timeout_seconds":"60"}`)
	sub("retries past 100", "steps[0].retries", steps(`[{"id":"s","retries":101}]`))
	sub("retries negative", "steps[0].retries", steps(`[{"id":"s","retries":-1}]`))
	// The one key of a step's spec the server reads: which exit codes say the machine failed.
	sub("infra_exit_codes with exit 0", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"cmd":"x","infra_exit_codes":[0]}}]`))
	sub("infra_exit_codes of 256", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"infra_exit_codes":[75,256]}}]`))
	sub("infra_exit_codes twice 75", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"infra_exit_codes":[75,75]}}]`))
	sub("infra_exit_codes as a string", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"infra_exit_codes":["75"]}}]`))
	sub("infra_exit_codes not a list", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"infra_exit_codes":75}}]`))
	sub("33 infra_exit_codes", "steps[0].spec.infra_exit_codes", steps(`[{"id":"a","spec":{"infra_exit_codes":`+
		jsonList(33, func(i int) string { return fmt.Sprint(i + 1) })+`}}]`))
	add(hostileCase{name: "submit: held again, another request", who: alice, method: "POST", target: "/v1/runs", body: `{"run_id":"held","needs":["board=rpi4"],"steps":[{"id":"other"}]}`, status: 409, code: "run_id_conflict"})
	add(hostileCase{name: "submit: a malformed dry run", who: alice, method: "POST", target: "/v1/runs?dry_run=true", body: steps(`[{"id":"a","after":["a"]}]`), status: 400, code: "invalid_request", path: "steps[0].after[0]"})
	// A number must fit PostgreSQL's numeric, not only a float64: 1e-20000 (a float64 rounds it
	// to 0 without an error) and 0e9999999999 would reach jsonb, which refuses them ("value
	// overflows numeric format", SQLSTATE 22003), and the submit would answer 500.
	add(hostileCase{name: "submit: a number past numeric's scale in a spec", who: alice, method: "POST", target: "/v1/runs", body: steps(`[{"id":"s","spec":{"n":1e-20000}}]`), status: 400, code: "invalid_request", path: "steps[0].spec.n"})
	add(hostileCase{name: "submit: a zero with a huge exponent in metadata", who: alice, method: "POST", target: "/v1/runs", body: `{"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}],"metadata":{"n":0e9999999999}}`, status: 400, code: "invalid_request", path: "metadata.n"})

	// --- Text encoding/json would have stored changed, as U+FFFD: bytes that are not UTF-8
	// (base64-encoded, as API Gateway sends a body that is not text, and raw in the event's
	// string) and surrogate escapes without their pair, in any string or key of any body.
	text := func(name string, who auth.Principal, method, target, path, body string) {
		add(hostileCase{name: name + ", base64", who: who, method: method, target: target, tamper: withBase64([]byte(body)), status: 400, code: "invalid_request", path: path})
		add(hostileCase{name: name + ", raw", who: who, method: method, target: target, tamper: withRawBody(body), status: 400, code: "invalid_request", path: path})
	}
	okSteps := `"run_id":"new-1","needs":["board=rpi4"],"steps":[{"id":"s"}]`
	okReport := fmt.Sprintf(`"node_id":"A","boot_id":"a1","epoch":%d`, epochA)
	text("submit: invalid UTF-8 in a spec value", alice, "POST", "/v1/runs", "steps[0].spec.cmd", steps("[{\"id\":\"s\",\"spec\":{\"cmd\":\"flash.sh \xff\"}}]"))
	text("submit: a UTF-8 surrogate in a spec value", alice, "POST", "/v1/runs", "steps[0].spec.cmd", steps("[{\"id\":\"s\",\"spec\":{\"cmd\":\"\xed\xa0\x80\"}}]"))
	text("submit: invalid UTF-8 in a spec key", alice, "POST", "/v1/runs", "steps[0].spec", steps("[{\"id\":\"s\",\"spec\":{\"c\xc0md\":1}}]"))
	text("submit: invalid UTF-8 in metadata", alice, "POST", "/v1/runs", "metadata.note", "{"+okSteps+",\"metadata\":{\"note\":\"caf\xe9\"}}")
	text("submit: invalid UTF-8 in a needed label", alice, "POST", "/v1/runs", "needs[0]", "{\"run_id\":\"new-1\",\"needs\":[\"board=rpi\xff\"],\"steps\":[{\"id\":\"s\"}]}")
	text("submit: a dry run with invalid UTF-8 in a spec", alice, "POST", "/v1/runs?dry_run=true", "steps[0].spec.cmd", steps("[{\"id\":\"s\",\"spec\":{\"cmd\":\"\x80\"}}]"))
	text("heartbeat: invalid UTF-8 in a label", nodeA, "PUT", "/v1/nodes/A", "labels[1]", "{\"boot_id\":\"a1\",\"labels\":[\"board=rpi4\",\"lab=\xfe\"]}")
	text("result: invalid UTF-8 in the message", nodeA, "POST", "/v1/runs/held/steps/flash/result", "message", "{"+okReport+",\"status\":\"failed\",\"message\":\"exit \xff\"}")
	text("result: invalid UTF-8 in the output", nodeA, "POST", "/v1/runs/held/steps/flash/result", "output", "{"+okReport+",\"status\":\"succeeded\",\"output\":\"\xe2\x82\"}")
	text("cancel: invalid UTF-8 in the reason", alice, "POST", "/v1/runs/held/cancel", "reason", "{\"reason\":\"stop \xc3\"}")
	sub("a lone high surrogate in a spec value", "steps[0].spec.cmd", steps(`[{"id":"s","spec":{"cmd":"\ud800"}}]`))
	sub("a lone low surrogate in a spec value", "steps[0].spec.cmd", steps(`[{"id":"s","spec":{"cmd":"\udc00"}}]`))
	sub("a high surrogate then a letter in a spec", "steps[0].spec.args[0]", steps(`[{"id":"s","spec":{"args":["\ud83dx"]}}]`))
	sub("a high surrogate then another escape in a spec", "steps[0].spec.cmd", steps(`[{"id":"s","spec":{"cmd":"\ud83d\u0041"}}]`))
	sub("a surrogate pair reversed in a spec", "steps[0].spec.cmd", steps(`[{"id":"s","spec":{"cmd":"\ude00\ud83d"}}]`))
	sub("a lone surrogate after an escaped backslash", "steps[0].spec.cmd", steps(`[{"id":"s","spec":{"cmd":"\\\ud800"}}]`))
	sub("a lone surrogate in a spec key", "steps[0].spec", steps(`[{"id":"s","spec":{"\ud800":1}}]`))
	sub("a lone surrogate in metadata", "metadata.note", `{`+okSteps+`,"metadata":{"note":"\udc00"}}`)
	sub("a lone surrogate in a metadata key", "metadata", `{`+okSteps+`,"metadata":{"\ud83d":1}}`)
	sub("a lone surrogate in a needed label", "needs[0]", `{"run_id":"new-1","needs":["\ud800"],"steps":[{"id":"s"}]}`)
	hbText := func(name, path, body string) {
		add(hostileCase{name: "heartbeat: " + name, who: nodeA, method: "PUT", target: "/v1/nodes/A", body: body, status: 400, code: "invalid_request", path: path})
	}
	hbText("a lone surrogate in a label", "labels[0]", `{"boot_id":"a1","labels":["\ud800"]}`)
	hbText("a lone surrogate in the boot_id", "boot_id", `{"boot_id":"a1\udc00","labels":["board=rpi4"]}`)
	resText := func(name, path, body string) {
		add(hostileCase{name: "result: " + name, who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: body, status: 400, code: "invalid_request", path: path})
	}
	resText("a lone surrogate in the message", "message", `{`+okReport+`,"status":"failed","message":"\udc00"}`)
	resText("a high surrogate at the end of the output", "output", `{`+okReport+`,"status":"succeeded","output":"ok \ud83d"}`)
	add(hostileCase{name: "cancel: a lone surrogate in the reason", who: alice, method: "POST", target: "/v1/runs/held/cancel", body: `{"reason":"stop \ud800"}`, status: 400, code: "invalid_request", path: "reason"})

	// --- Heartbeat: the node's own route, with a body that must not change the node.
	hb := func(name, path, body string) {
		add(hostileCase{name: "heartbeat: " + name, who: nodeA, method: "PUT", target: "/v1/nodes/A", body: body, status: 400, code: "invalid_request", path: path})
	}
	for _, id := range []string{"", "a b", "-a1", long, "été", "../a1", "a\\u0000", "a\\u0001", "'; DROP TABLE nodes;--"} {
		hb(fmt.Sprintf("boot_id %q", id), "boot_id", `{"boot_id":"`+id+`","labels":["board=rpi4"]}`)
		hb(fmt.Sprintf("label %q", id), "labels[0]", `{"boot_id":"a1","labels":["`+id+`"]}`)
	}
	hb("no boot_id", "boot_id", `{"labels":["board=rpi4"]}`)
	hb("boot_id null", "boot_id", `{"boot_id":null}`)
	hb("wrong types", "boot_id", `{"boot_id":1,"labels":"board=rpi4","draining":"no"}`)
	hb("a label that is a number", "labels[0]", `{"boot_id":"a1","labels":[7]}`)
	hb("labels as an object", "labels", `{"boot_id":"a1","labels":{"board":"rpi4"}}`)
	// Not the same as no labels: read so, the heartbeat would drop every label A has.
	hb("labels null", "labels", `{"boot_id":"a1","labels":null}`)
	hb("65 labels", "labels", `{"boot_id":"a1","labels":`+jsonList(65, func(i int) string { return fmt.Sprintf(`"l%d"`, i) })+`}`)
	hb("10,000 labels", "labels", `{"boot_id":"a1","labels":`+jsonList(10000, func(i int) string { return fmt.Sprintf(`"l%d"`, i) })+`}`)
	hb("a label key of 64 characters", "labels[0]", `{"boot_id":"a1","labels":["`+strings.Repeat("k", 64)+`"]}`)
	hb("a label value of 128 characters", "labels[0]", `{"boot_id":"a1","labels":["k=`+strings.Repeat("v", 128)+`"]}`)
	hb("duplicate boot_id, the second a restart", "boot_id", `{"boot_id":"a1","boot_id":"a2"}`)
	hb("draining as a number", "draining", `{"boot_id":"a1","draining":1}`)
	hb("a misspelt field", "lables", `{"boot_id":"a1","lables":["board=rpi4"]}`)
	// A node's own health: a reason a person reads, or nothing at all.
	hb("unhealthy without a reason", "unhealthy", `{"boot_id":"a1","unhealthy":""}`)
	hb("unhealthy as true", "unhealthy", `{"boot_id":"a1","unhealthy":true}`)
	hb("unhealthy with a newline, forging a line of the table", "unhealthy", `{"boot_id":"a1","unhealthy":"disk\nrpi-9 healthy"}`)
	hb("unhealthy with an escape sequence", "unhealthy", `{"boot_id":"a1","unhealthy":"\u001b[2J"}`)
	hb("unhealthy of 513 bytes", "unhealthy", `{"boot_id":"a1","unhealthy":"`+strings.Repeat("x", 513)+`"}`)

	// --- Quarantine and a node's history: admins only, a reason a person reads.
	quarantine := func(name, path, body string) {
		add(hostileCase{name: "quarantine: " + name, who: apitest.Admin, method: "POST", target: "/v1/nodes/A/quarantine", body: body, status: 400, code: "invalid_request", path: path})
	}
	quarantine("a reason of 513 bytes", "reason", `{"reason":"`+strings.Repeat("x", 513)+`"}`)
	quarantine("a reason with a carriage return", "reason", `{"reason":"usb\rhealthy"}`)
	quarantine("a reason that is a number", "reason", `{"reason":7}`)
	quarantine("a misspelt field", "raeson", `{"raeson":"usb"}`)
	quarantine("a node id that is SQL", "node_id", `{"reason":"usb"}`)
	cases[len(cases)-1].tamper = withPathParam("node_id", "A' OR '1'='1")
	check := func(name, path, body string) {
		add(hostileCase{name: "health check: " + name, who: apitest.Admin, method: "PUT", target: "/v1/health-checks/usb", body: body, status: 400, code: "invalid_request", path: path})
	}
	check("no needs", "needs", `{"steps":[{"id":"s"}]}`)
	check("roles instead of needs", "roles", `{"roles":{"a":{"needs":["x"]}},"steps":[{"id":"s","role":"a"}]}`)
	check("no steps", "steps", `{"needs":["board=rpi4"]}`)
	check("every_seconds 0", "every_seconds", `{"needs":["board=rpi4"],"steps":[{"id":"s"}],"every_seconds":0}`)
	check("every_seconds past a week", "every_seconds", `{"needs":["board=rpi4"],"steps":[{"id":"s"}],"every_seconds":604801}`)
	check("a step waiting for itself", "steps[0].after[0]", `{"needs":["board=rpi4"],"steps":[{"id":"s","after":["s"]}]}`)
	check("a name that is SQL", "name", `{"needs":["board=rpi4"],"steps":[{"id":"s"}]}`)
	cases[len(cases)-1].tamper = withPathParam("name", "usb' OR '1'='1")
	add(
		hostileCase{name: "health check: a client", who: alice, method: "PUT", target: "/v1/health-checks/usb", body: `{"needs":["x"],"steps":[{"id":"s"}]}`, status: 403, code: "forbidden"},
		hostileCase{name: "health check: a node", who: nodeA, method: "DELETE", target: "/v1/health-checks/usb", status: 403, code: "forbidden"},
		hostileCase{name: "health check: none of that name", who: apitest.Admin, method: "DELETE", target: "/v1/health-checks/nope", status: 404, code: "not_found"},
		hostileCase{name: "health checks: a client lists them", who: bob, method: "GET", target: "/v1/health-checks", status: 403, code: "forbidden"},
	)
	add(
		hostileCase{name: "quarantine: a client", who: alice, method: "POST", target: "/v1/nodes/A/quarantine", body: `{"reason":"mine"}`, status: 403, code: "forbidden"},
		hostileCase{name: "quarantine: a node, of itself", who: nodeA, method: "POST", target: "/v1/nodes/A/quarantine", body: `{"reason":"mine"}`, status: 403, code: "forbidden"},
		hostileCase{name: "unquarantine: a node, of itself", who: nodeA, method: "DELETE", target: "/v1/nodes/A/quarantine", status: 403, code: "forbidden"},
		hostileCase{name: "unquarantine: a client", who: bob, method: "DELETE", target: "/v1/nodes/A/quarantine", status: 403, code: "forbidden"},
		hostileCase{name: "quarantine: a node not in the fleet", who: apitest.Admin, method: "POST", target: "/v1/nodes/nope/quarantine", body: `{"reason":"x"}`, status: 404, code: "not_found"},
		hostileCase{name: "unquarantine: a node not in the fleet", who: apitest.Admin, method: "DELETE", target: "/v1/nodes/nope/quarantine", status: 404, code: "not_found"},
		hostileCase{name: "a node's history: a client", who: alice, method: "GET", target: "/v1/nodes/A", status: 403, code: "forbidden"},
		hostileCase{name: "a node's history: the node itself", who: nodeA, method: "GET", target: "/v1/nodes/A", status: 403, code: "forbidden"},
		hostileCase{name: "a node's history: a node not in the fleet", who: apitest.Admin, method: "GET", target: "/v1/nodes/nope", status: 404, code: "not_found"},
	)

	// --- Result: the assigned node, with bodies that are not a report.
	res := func(name, path, body string, status int, code string) {
		add(hostileCase{name: "result: " + name, who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result", body: body, status: status, code: code, path: path})
	}
	ok := fmt.Sprintf(`"node_id":"A","boot_id":"a1","epoch":%d`, epochA)
	res("no epoch", "epoch", `{"node_id":"A","boot_id":"a1","status":"succeeded"}`, 400, "invalid_request")
	res("a failure of an unknown kind", "failure", `{`+ok+`,"status":"failed","failure":"hardware"}`, 400, "invalid_request")
	res("a failure that is not a string", "failure", `{`+ok+`,"status":"failed","failure":1}`, 400, "invalid_request")
	res("a failure on a succeeded report", "failure", `{`+ok+`,"status":"succeeded","failure":"infra"}`, 400, "invalid_request")
	res("epoch 0", "epoch", `{"node_id":"A","boot_id":"a1","epoch":0,"status":"succeeded"}`, 400, "invalid_request")
	res("epoch negative", "epoch", `{"node_id":"A","boot_id":"a1","epoch":-1,"status":"succeeded"}`, 400, "invalid_request")
	res("epoch past int64", "epoch", `{"node_id":"A","boot_id":"a1","epoch":9223372036854775808,"status":"succeeded"}`, 400, "invalid_request")
	res("epoch as a string", "epoch", fmt.Sprintf(`{"node_id":"A","boot_id":"a1","epoch":"%d","status":"succeeded"}`, epochA), 400, "invalid_request")
	res("epoch fractional", "epoch", fmt.Sprintf(`{"node_id":"A","boot_id":"a1","epoch":%d.5,"status":"succeeded"}`, epochA), 400, "invalid_request")
	res("no status", "status", `{`+ok+`}`, 400, "invalid_request")
	res("status in capitals", "status", `{`+ok+`,"status":"SUCCEEDED"}`, 400, "invalid_request")
	res("status unknown", "status", `{`+ok+`,"status":"skipped"}`, 400, "invalid_request")
	res("status as a number", "status", `{`+ok+`,"status":1}`, 400, "invalid_request")
	res("no node_id", "node_id", fmt.Sprintf(`{"boot_id":"a1","epoch":%d,"status":"succeeded"}`, epochA), 400, "invalid_request")
	res("node_id that is SQL", "node_id", fmt.Sprintf(`{"node_id":"A' OR '1'='1","boot_id":"a1","epoch":%d,"status":"succeeded"}`, epochA), 400, "invalid_request")
	res("boot_id with a control character", "boot_id", fmt.Sprintf(`{"node_id":"A","boot_id":"a1\u0007","epoch":%d,"status":"succeeded"}`, epochA), 400, "invalid_request")
	res("exit_code past int32", "exit_code", `{`+ok+`,"status":"failed","exit_code":2147483648}`, 400, "invalid_request")
	res("exit_code as a string", "exit_code", `{`+ok+`,"status":"failed","exit_code":"1"}`, 400, "invalid_request")
	// An exit code is what its status says it can be. Each of these reports would be taken
	// without its exit_code (flash is RUNNING on A): it is refused for that alone.
	exit := func(name, status, code, says string) {
		add(hostileCase{name: "result: " + name, who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/result",
			body: `{` + ok + `,"status":"` + status + `","exit_code":` + code + `}`, status: 400, code: "invalid_request", path: "exit_code", says: says})
	}
	exit("started with an exit_code", "started", "0", "a started report carries no exit_code")
	exit("started with a failure's exit_code", "started", "1", "a started report carries no exit_code")
	exit("succeeded with exit_code 1", "succeeded", "1", "must be 0, or absent, in a succeeded report")
	exit("succeeded with exit_code -1", "succeeded", "-1", "must be 0, or absent, in a succeeded report")
	exit("failed with exit_code -1", "failed", "-1", "must be a whole number from 0 to 255")
	exit("failed with exit_code 256", "failed", "256", "must be a whole number from 0 to 255")
	exit("failed with exit_code 1.5", "failed", "1.5", "must be a whole number from 0 to 255")
	exit("cancelled with exit_code -1", "cancelled", "-1", "must be a whole number from 0 to 255")
	exit("cancelled with exit_code 256", "cancelled", "256", "must be a whole number from 0 to 255")
	res("NUL in the message", "message", `{`+ok+`,"status":"failed","message":"oops\u0000"}`, 400, "invalid_request")
	res("NUL in the output", "output", `{`+ok+`,"status":"failed","output":"\u0000"}`, 400, "invalid_request")
	res("message as an object", "message", `{`+ok+`,"status":"failed","message":{"text":"x"}}`, 400, "invalid_request")
	res("duplicate status", "status", `{`+ok+`,"status":"started","status":"succeeded"}`, 400, "invalid_request")
	res("a message over 4 KiB", "message", `{`+ok+`,"status":"succeeded","exit_code":0,"message":"`+strings.Repeat("m", 5000)+`"}`, 413, "payload_too_large")
	res("an output over 64 KiB", "output", `{`+ok+`,"status":"succeeded","exit_code":0,"output":"`+strings.Repeat("o", 70000)+`"}`, 413, "payload_too_large")

	// --- Result: a log summary that is not one.
	res("a log on a started report", "log", `{`+ok+`,"status":"started","log":{"bytes":1,"sha256":"`+strings.Repeat("a", 64)+`","uploaded":true}}`, 400, "invalid_request")
	res("a log of negative size", "log.bytes", `{`+ok+`,"status":"failed","log":{"bytes":-1,"sha256":"`+strings.Repeat("a", 64)+`","uploaded":true}}`, 400, "invalid_request")
	res("a log size past int64", "log.bytes", `{`+ok+`,"status":"failed","log":{"bytes":9223372036854775808,"sha256":"`+strings.Repeat("a", 64)+`","uploaded":true}}`, 400, "invalid_request")
	res("a log digest in capitals", "log.sha256", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"`+strings.Repeat("A", 64)+`","uploaded":true}}`, 400, "invalid_request")
	res("a log digest of 63 characters", "log.sha256", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"`+strings.Repeat("a", 63)+`","uploaded":true}}`, 400, "invalid_request")
	res("a log digest that is SQL", "log.sha256", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"' OR '1'='1","uploaded":true}}`, 400, "invalid_request")
	res("a log without uploaded", "log.uploaded", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"`+strings.Repeat("a", 64)+`"}}`, 400, "invalid_request")
	res("a log uploaded as a string", "log.uploaded", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"`+strings.Repeat("a", 64)+`","uploaded":"yes"}}`, 400, "invalid_request")
	res("a log with a field of its own", "log.chunks", `{`+ok+`,"status":"failed","log":{"bytes":1,"sha256":"`+strings.Repeat("a", 64)+`","uploaded":true,"chunks":[]}}`, 400, "invalid_request")
	res("a log as a string", "log", `{`+ok+`,"status":"failed","log":"all of it"}`, 400, "invalid_request")

	// --- Log URLs: the running node, with bodies that are not a request for URLs; anyone else.
	urls := func(name, path, body string) {
		add(hostileCase{name: "log-urls: " + name, who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", body: body, status: 400, code: "invalid_request", path: path})
	}
	urls("no from", "from", `{`+ok+`,"count":16}`)
	urls("no count", "count", `{`+ok+`,"from":0}`)
	urls("count 0", "count", `{`+ok+`,"from":0,"count":0}`)
	urls("count 65", "count", `{`+ok+`,"from":0,"count":65}`)
	urls("from negative", "from", `{`+ok+`,"from":-1,"count":1}`)
	urls("from past the last chunk number", "from", `{`+ok+`,"from":100000000,"count":1}`)
	urls("a batch past the last chunk number", "count", `{`+ok+`,"from":99999990,"count":11}`)
	urls("from fractional", "from", `{`+ok+`,"from":0.5,"count":1}`)
	urls("count as a string", "count", `{`+ok+`,"from":0,"count":"16"}`)
	urls("no epoch", "epoch", `{"node_id":"A","boot_id":"a1","from":0,"count":1}`)
	urls("a misspelt field", "cnt", `{`+ok+`,"from":0,"count":1,"cnt":1}`)
	urls("a step id ../", "step_id", `{`+ok+`,"from":0,"count":1}`)
	cases[len(cases)-1].tamper = withPathParam("step_id", "../flash")
	add(
		hostileCase{name: "log-urls: a client asks", who: alice, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 403, code: "forbidden"},
		hostileCase{name: "log-urls: an admin asks", who: apitest.Admin, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 403, code: "forbidden"},
		hostileCase{name: "log-urls: node B asks in A's name", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 403, code: "forbidden"},
		hostileCase{name: "log-urls: node B asks for A's step as itself", who: nodeB, method: "POST", target: "/v1/runs/held/steps/flash/log-urls",
			body: fmt.Sprintf(`{"node_id":"B","boot_id":"b1","epoch":%d,"from":0,"count":1}`, epochB), status: 409, code: "stale_assignment"},
		hostileCase{name: "log-urls: node A under another boot", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/log-urls",
			body: fmt.Sprintf(`{"node_id":"A","boot_id":"old-boot","epoch":%d,"from":0,"count":1}`, epochA), status: 409, code: "stale_assignment"},
		hostileCase{name: "log-urls: a step not started", who: nodeA, method: "POST", target: "/v1/runs/held/steps/test/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 409, code: "stale_assignment"},
		hostileCase{name: "log-urls: an unknown run", who: nodeA, method: "POST", target: "/v1/runs/nope/steps/flash/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 404, code: "not_found"},
		hostileCase{name: "log-urls: an unknown step", who: nodeA, method: "POST", target: "/v1/runs/held/steps/nope/log-urls", body: `{` + ok + `,"from":0,"count":1}`, status: 404, code: "not_found"},
		hostileCase{name: "log-urls: a gzipped body", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", tamper: gzipped(t, `{`+ok+`,"from":0,"count":1}`), status: 415, code: "unsupported_media_type"},
		hostileCase{name: "log-urls: an oversized body", who: nodeA, method: "POST", target: "/v1/runs/held/steps/flash/log-urls", body: oversized, status: 413, code: "payload_too_large"},
	)

	// --- A step's log: who may read it, and query strings that are not a reading.
	add(
		hostileCase{name: "log: another client reads alice's", who: bob, method: "GET", target: "/v1/runs/held/steps/flash/log", status: 404, code: "not_found"},
		hostileCase{name: "log: a node reads the step it runs", who: nodeA, method: "GET", target: "/v1/runs/held/steps/flash/log", status: 403, code: "forbidden"},
		hostileCase{name: "log: an unknown step", who: alice, method: "GET", target: "/v1/runs/held/steps/nope/log", status: 404, code: "not_found"},
		hostileCase{name: "log: an attempt the run has not reached", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?attempt=2", status: 404, code: "not_found"},
		hostileCase{name: "log: attempt 0", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?attempt=0", status: 400, code: "invalid_request", path: "attempt"},
		hostileCase{name: "log: attempt as a word", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?attempt=latest", status: 400, code: "invalid_request", path: "attempt"},
		hostileCase{name: "log: attempt past max_attempts' bound", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?attempt=101", status: 400, code: "invalid_request", path: "attempt"},
		hostileCase{name: "log: attempt twice", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?attempt=1&attempt=1", status: 400, code: "invalid_request", path: "attempt"},
		hostileCase{name: "log: an unknown parameter", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?follow=true", status: 400, code: "invalid_request", path: "follow"},
		hostileCase{name: "log: a client names an owner", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log?owner=client:bob", status: 403, code: "forbidden"},
		hostileCase{name: "log: an admin names an owner that is no owner", who: apitest.Admin, method: "GET", target: "/v1/runs/held/steps/flash/log?owner=alice", status: 400, code: "invalid_request", path: "owner"},
		hostileCase{name: "log: a step id with a colon", who: alice, method: "GET", target: "/v1/runs/held/steps/a:b/log", status: 400, code: "invalid_request", path: "step_id"},
		hostileCase{name: "log: a run id ../", who: alice, method: "GET", target: "/v1/runs/held/steps/flash/log", tamper: withPathParam("run_id", "../held"), status: 400, code: "invalid_request", path: "run_id"},
	)

	// --- Cancel: bodies that are not a cancel.
	can := func(name, path, body string) {
		add(hostileCase{name: "cancel: " + name, who: alice, method: "POST", target: "/v1/runs/held/cancel", body: body, status: 400, code: "invalid_request", path: path})
	}
	can("reason as a number", "reason", `{"reason":5}`)
	can("force as a string", "force", `{"force":"true"}`)
	can("NUL in the reason", "reason", `{"reason":"stop\u0000now"}`)
	can("a reason over 1 KiB", "reason", `{"reason":"`+strings.Repeat("r", 2000)+`"}`)
	can("duplicate force", "force", `{"force":false,"force":true}`)
	can("a misspelt field", "reasons", `{"reasons":"x"}`)

	t.Logf("%d hostile cases", len(cases))
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		seen[tc.name] = true
	}

	// Sequential on purpose: the snapshot around each case then belongs to that case alone.
	// The cases share the fixture because none of them may write.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, env)
			ev, route := env.Event(tc.who, tc.method, tc.target, tc.body)
			if tc.tamper != nil {
				tc.tamper(&ev)
			}
			resp := env.Invoke(route.Function, ev)
			shown := resp.String()
			if len(shown) > 600 {
				shown = shown[:600] + "…"
			}
			if resp.Status != tc.status {
				t.Errorf("status %d, want %d: %s", resp.Status, tc.status, shown)
			}
			checkProblem(t, resp, ev.RequestContext.RequestID, tc.code, tc.path)
			if tc.says != "" && !strings.Contains(string(resp.Body), tc.says) {
				t.Errorf("the problem does not say %q: %s", tc.says, shown)
			}
			if after := snapshot(t, env); !equalMaps(before, after) {
				for _, table := range stateTables {
					if before[table] != after[table] {
						t.Errorf("%s changed: %s, then %s", table, before[table], after[table])
					}
				}
			}
		})
	}
	env.CheckInvariants()
}

// checkProblem: an RFC 9457 body with the code wanted, every 400 problem with its path (one of
// them at path, when given — the refusal is for the reason the case is about), and nothing of
// Mediator's insides.
func checkProblem(t *testing.T, resp apitest.Response, requestID, code, path string) {
	t.Helper()
	if ct := resp.Headers["content-type"]; ct != "application/problem+json" {
		t.Errorf("content-type %q", ct)
	}
	var p problemBody
	if err := json.Unmarshal(resp.Body, &p); err != nil {
		t.Fatalf("the body is not JSON (%v): %s", err, resp.Body)
	}
	if p.Code != code {
		t.Errorf("code %q, want %q", p.Code, code)
	}
	if p.Type != "/problems/"+p.Code || p.Title == "" || p.Status != resp.Status || p.RequestID == "" || p.RequestID != requestID {
		t.Errorf("not a whole problem (type, title, status, code, request_id %q): %s", requestID, resp.Body)
	}
	if resp.Status == http.StatusBadRequest {
		if len(p.Errors) == 0 {
			t.Errorf("a 400 with no errors: %s", resp.Body)
		}
		found := path == ""
		for _, e := range p.Errors {
			got, ok := e["path"].(string)
			if !ok {
				t.Errorf("an error without its path: %v", e)
			}
			found = found || got == path
		}
		if !found {
			t.Errorf("no problem at %q: %s", path, resp.Body)
		}
		for _, e := range p.Errors {
			if m, _ := e["message"].(string); m == "" {
				t.Errorf("an error without its message: %v", e)
			}
		}
	}
	lower := strings.ToLower(string(resp.Body))
	for _, leak := range leaks {
		if strings.Contains(lower, leak) {
			t.Errorf("the body carries %q: %s", leak, resp.Body)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Strings that look like SQL, and control characters other than NUL, are data: accepted in a
// spec, metadata and a cancel reason, and stored and returned byte for byte, while the schema
// stays whole. (NUL and the same strings in ids are refused: TestHostileCatalogue.)
func TestHostileStringsAreData(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "a1", false, "board=rpi4")
	hostile := "'; DROP TABLE runs;-- \" \\ \x01\x07\x08\t\n\r\x1b[31m\x7f </script> 𝄞 \u2028 %00 ../../etc/passwd"
	body := map[string]any{
		"run_id": "data", "needs": []string{"board=rpi4"}, "metadata": map[string]any{"note": hostile, hostile: 1},
		"steps": []map[string]any{{"id": "s", "spec": map[string]any{"cmd": hostile, "args": []string{hostile}}}},
	}

	// A dry run takes it and stores nothing.
	if resp := env.Do(alice, "POST", "/v1/runs?dry_run=true", body); resp.Status != 200 {
		t.Fatalf("dry run: %s", resp)
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("the dry run stored %d runs", n)
	}

	resp := env.Do(alice, "POST", "/v1/runs", body)
	if resp.Status != 201 {
		t.Fatalf("submit: %s", resp)
	}
	var got struct {
		Run store.Run `json:"run"`
	}
	resp = env.Do(alice, "GET", "/v1/runs/data", nil)
	resp.Decode(t, &got)
	var meta map[string]any
	if err := json.Unmarshal(got.Run.Metadata, &meta); err != nil || meta["note"] != hostile || meta[hostile] != float64(1) {
		t.Fatalf("metadata did not come back as sent: %s", got.Run.Metadata)
	}
	_, beat := env.Beat("A", "a1", false, "board=rpi4")
	if len(beat.Steps) != 1 {
		t.Fatalf("A's steps: %+v", beat.Steps)
	}
	var spec struct {
		Cmd  string   `json:"cmd"`
		Args []string `json:"args"`
	}
	if err := json.Unmarshal(beat.Steps[0].Spec, &spec); err != nil || spec.Cmd != hostile || len(spec.Args) != 1 || spec.Args[0] != hostile {
		t.Fatalf("the spec did not reach the node as sent: %s", beat.Steps[0].Spec)
	}

	// The same string as a cancel reason is kept as it is.
	if resp := env.Do(alice, "POST", "/v1/runs/data/cancel", map[string]any{"reason": hostile}); resp.Status != 200 && resp.Status != 202 {
		t.Fatalf("cancel: %s", resp)
	}
	var reason string
	if err := env.Store.Pool().QueryRow(context.Background(), `SELECT cancel_reason FROM runs WHERE run_id = 'data'`).Scan(&reason); err != nil || reason != hostile {
		t.Fatalf("cancel_reason %q (%v)", reason, err)
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 1 {
		t.Fatalf("%d runs", n)
	}
	env.CheckInvariants()
}

// A character past U+FFFF escaped as JSON writes it — a surrogate pair — is text like any
// other, as is a backslash before "ud800": accepted in a spec, metadata, a report and a cancel
// reason, and stored as the characters they stand for. (Unpaired surrogates are refused:
// TestHostileCatalogue.)
func TestSurrogatePairsAreText(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "a1", false, "board=rpi4")
	body := `{"run_id":"pair","needs":["board=rpi4"],"steps":[{"id":"s","spec":{"cmd":"\ud83d\ude00 \\ud800","\uD834\uDD1E":true}}],` +
		`"metadata":{"note":"\ud83d\ude80"}}`
	if resp := env.Do(alice, "POST", "/v1/runs", body); resp.Status != 201 {
		t.Fatalf("submit: %s", resp)
	}
	var got struct {
		Run store.Run `json:"run"`
	}
	env.Do(alice, "GET", "/v1/runs/pair", nil).Decode(t, &got)
	var meta map[string]string
	if err := json.Unmarshal(got.Run.Metadata, &meta); err != nil || meta["note"] != "🚀" {
		t.Fatalf("metadata: %s", got.Run.Metadata)
	}
	_, beat := env.Beat("A", "a1", false, "board=rpi4")
	if len(beat.Steps) != 1 {
		t.Fatalf("A's steps: %+v", beat.Steps)
	}
	var spec map[string]any
	if err := json.Unmarshal(beat.Steps[0].Spec, &spec); err != nil || spec["cmd"] != `😀 \ud800` || spec["𝄞"] != true {
		t.Fatalf("the spec reached the node as %s", beat.Steps[0].Spec)
	}
	report := fmt.Sprintf(`{"node_id":"A","boot_id":"a1","epoch":%d,"status":"started","message":"\ud83d\udca5"}`, beat.Lease.Epoch)
	if resp := env.Do(apitest.Node("A"), "POST", "/v1/runs/pair/steps/s/result", report); resp.Status != 200 {
		t.Fatalf("report: %s", resp)
	}
	var message string
	if err := env.Store.Pool().QueryRow(context.Background(), `SELECT message FROM steps WHERE run_id = 'pair'`).Scan(&message); err != nil || message != "💥" {
		t.Fatalf("message %q (%v)", message, err)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/pair/cancel", `{"reason":"\ud83d\uded1"}`); resp.Status != 200 && resp.Status != 202 {
		t.Fatalf("cancel: %s", resp)
	}
	var reason string
	if err := env.Store.Pool().QueryRow(context.Background(), `SELECT cancel_reason FROM runs WHERE run_id = 'pair'`).Scan(&reason); err != nil || reason != "🛑" {
		t.Fatalf("cancel_reason %q (%v)", reason, err)
	}
}

// A body declared as what it is — JSON in UTF-8, uncompressed — is read however the
// declaration is written, and so is one that declares no media type (the refused
// declarations are in TestHostileCatalogue).
func TestBodiesDeclaredAsJSONAreRead(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "a1", false, "board=rpi4")
	for i, tamper := range []func(*events.APIGatewayV2HTTPRequest){
		withContentType("application/json"),
		withContentType("application/json; charset=utf-8"),
		withContentType("application/json;charset=UTF-8"),
		withContentType(`Application/JSON; Charset="Utf-8"`),
		withHeader("content-encoding", "identity"),
		withHeader("content-encoding", " IDENTITY "),
	} {
		id := fmt.Sprintf("declared-%d", i)
		ev, route := env.Event(alice, "POST", "/v1/runs", oneNodeRun(id, "board=rpi4"))
		tamper(&ev)
		if resp := env.Invoke(route.Function, ev); resp.Status != 201 && resp.Status != 202 {
			t.Errorf("%s (headers %v): %s", id, ev.Headers, resp)
		}
	}
	// Sent to the handler itself: OpenAPI keys a request body by its media type, so the
	// document cannot describe one without (its prose says it is read as JSON), and the
	// contract check would refuse the exchange for that alone.
	ev, route := env.Event(alice, "POST", "/v1/runs", oneNodeRun("undeclared", "board=rpi4"))
	delete(ev.Headers, "content-type")
	if resp, err := env.Functions[route.Function](t.Context(), ev); err != nil || resp.StatusCode != 202 {
		t.Errorf("a body without a Content-Type: %v %d %s", err, resp.StatusCode, resp.Body)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE run_id LIKE 'declared-%' OR run_id = 'undeclared'`); n != 7 {
		t.Fatalf("%d of 7 runs stored", n)
	}
}

package httpapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/pb33f/libopenapi"

	"mediator/localdev/apitest"
	"mediator/localdev/openapicheck"
	"mediator/shared/httpapi"
)

// GET /v1/openapi.json serves the document, as JSON, to anyone: the same document, every
// route in it.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for _, who := range []struct {
		name string
		resp apitest.Response
	}{
		{"no principal", env.Do(apitest.Nobody, "GET", "/v1/openapi.json", nil)},
		{"a node", env.Do(apitest.Node("A"), "GET", "/v1/openapi.json", nil)},
	} {
		resp := who.resp
		if resp.Status != 200 || resp.Headers["content-type"] != "application/json" {
			t.Fatalf("%s: %d %v", who.name, resp.Status, resp.Headers)
		}
		var doc struct {
			OpenAPI string                    `json:"openapi"`
			Paths   map[string]map[string]any `json:"paths"`
		}
		resp.Decode(t, &doc)
		if doc.OpenAPI != "3.1.0" {
			t.Fatalf("%s: openapi %q", who.name, doc.OpenAPI)
		}
		for _, r := range httpapi.Routes {
			if doc.Paths[r.Path][strings.ToLower(r.Method)] == nil {
				t.Errorf("%s: the served document lacks %s", who.name, r.Key())
			}
		}
		// What a client's tooling reads is the document as written.
		d, err := libopenapi.NewDocument(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.BuildV3Model(); err != nil {
			t.Fatalf("%s: the served JSON does not build: %v", who.name, err)
		}
		var fromYAML, served any
		want, err := httpapi.OpenAPIJSON()
		if err != nil {
			t.Fatal(err)
		}
		if json.Unmarshal(want, &fromYAML) != nil || json.Unmarshal(resp.Body, &served) != nil || !jsonEqual(fromYAML, served) {
			t.Fatalf("%s: the served document is not openapi.yaml", who.name)
		}
	}
	// Strict like every route: a query parameter it does not take is refused.
	if resp := env.Do(apitest.Nobody, "GET", "/v1/openapi.json?format=yaml", nil); resp.Status != 400 {
		t.Fatalf("?format=yaml: %s", resp)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The document describes exactly the routes the gateway serves, each way round.
func TestOpenAPIRoutesMatchTheRouteTable(t *testing.T) {
	t.Parallel()
	documented, err := openapicheck.DocumentRoutes(httpapi.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range openapicheck.DiffRoutes(documented, httpapi.Routes) {
		t.Error(d)
	}
	// The comparison itself fails when a route goes missing from either side.
	if len(openapicheck.DiffRoutes(documented[1:], httpapi.Routes)) != 1 ||
		len(openapicheck.DiffRoutes(documented, httpapi.Routes[1:])) != 1 {
		t.Fatal("a route removed from one side is not reported")
	}
}

// Everything `make lint` checks of the document: valid OpenAPI 3.1, references, routes,
// closed object schemas, security, examples that fit.
func TestOpenAPIDocumentChecks(t *testing.T) {
	t.Parallel()
	for _, f := range openapicheck.Check(httpapi.OpenAPI, httpapi.Routes) {
		t.Error(f)
	}
}

// The harness's check bites: a real answer with one thing changed — a member the document
// does not name, a status it does not list, a 503 without Retry-After, a problem code the
// route never answers — is reported, and so is an accepted request the document would refuse.
func TestContractCatchesWhatTheDocumentDoesNotSay(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	contract, err := apitest.TheContract()
	if err != nil {
		t.Fatal(err)
	}
	env.Beat("A", "a1", false, "board=rpi4")
	submit, _ := env.Event(alice, "POST", "/v1/runs", oneNodeRun("r", "board=rpi4"))
	placed := lambdaResponse(env.Invoke("submit", submit))
	if placed.StatusCode != 201 {
		t.Fatalf("submit: %d %s", placed.StatusCode, placed.Body)
	}
	if found := contract.Check(submit, placed); found != nil {
		t.Fatalf("the real answer is not as documented: %v", found)
	}

	doctor := func(fn func(*events.APIGatewayV2HTTPResponse)) events.APIGatewayV2HTTPResponse {
		r := placed
		r.Headers = map[string]string{}
		for k, v := range placed.Headers {
			r.Headers[k] = v
		}
		fn(&r)
		return r
	}
	problem := func(status int, code string) func(*events.APIGatewayV2HTTPResponse) {
		return func(r *events.APIGatewayV2HTTPResponse) {
			r.StatusCode, r.Headers["content-type"] = status, "application/problem+json"
			b, _ := json.Marshal(map[string]any{"type": "/problems/" + code, "title": "t", "status": status, "code": code})
			r.Body = string(b)
		}
	}
	for _, c := range []struct {
		name string
		resp events.APIGatewayV2HTTPResponse
		want string // a word the finding must have
	}{
		{"a member the run does not have", doctor(func(r *events.APIGatewayV2HTTPResponse) {
			r.Body = strings.Replace(r.Body, `"run_id":"r"`, `"run_id":"r","colour":"blue"`, 1)
		}), "colour"},
		{"a member the answer does not have", doctor(func(r *events.APIGatewayV2HTTPResponse) {
			r.Body = strings.TrimSuffix(r.Body, "}") + `,"placed":true}`
		}), "placed"},
		{"a required member missing", doctor(func(r *events.APIGatewayV2HTTPResponse) {
			r.Body = strings.Replace(r.Body, `"max_attempts":1,`, ``, 1)
		}), "max_attempts"},
		{"a state the document does not list", doctor(func(r *events.APIGatewayV2HTTPResponse) {
			r.Body = strings.Replace(r.Body, `"RUNNING"`, `"STARTING"`, 1)
		}), "run.state"},
		{"a status the route does not answer", doctor(func(r *events.APIGatewayV2HTTPResponse) { r.StatusCode = 204 }), "204"},
		{"404 on a route that finds nothing", doctor(problem(404, "not_found")), "404"},
		{"a problem code the route never answers", doctor(problem(409, "stale_assignment")), "$.code"},
		{"503 without Retry-After", doctor(problem(503, "unavailable")), "Retry-After"},
		{"a problem as application/json", doctor(func(r *events.APIGatewayV2HTTPResponse) {
			problem(400, "invalid_request")(r)
			r.Headers["content-type"] = "application/json"
		}), "application/json"},
	} {
		found := contract.Check(submit, c.resp)
		if found == nil || !strings.Contains(strings.Join(found, "\n"), c.want) {
			t.Errorf("%s: found %q, want a finding about %q", c.name, found, c.want)
		}
	}

	// An accepted request the document does not describe is reported too.
	odd, _ := env.Event(alice, "POST", "/v1/runs?dry_run=yes", oneNodeRun("r", "board=rpi4"))
	dry := events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"content-type": "application/json"},
		Body: `{"verdict":"placeable","assigned":{"main":"A"},"unmet":[],"width":1}`}
	if found := contract.Check(odd, dry); !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, "dry_run") }) {
		t.Errorf("?dry_run=yes answered 200: found %q", found)
	}
	// The document holds a report's exit_code to its status's rule: one taken against it is
	// reported.
	took := events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"content-type": "application/json"},
		Body: `{"run_id":"r","step_id":"s1","step_state":"RUNNING","run_state":"RUNNING","next":[]}`}
	for status, code := range map[string]int{"started": 0, "succeeded": 1, "failed": -1, "cancelled": 256} {
		report, _ := env.Event(apitest.Node("A"), "POST", "/v1/runs/r/steps/s1/result",
			map[string]any{"node_id": "A", "boot_id": "b1", "epoch": 1, "status": status, "exit_code": code})
		if found := contract.Check(report, took); !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, "exit_code") }) {
			t.Errorf("a %s report with exit_code %d answered 200: found %q", status, code, found)
		}
	}
	// And so is a 2xx to a principal of a kind the route does not serve.
	asNode, _ := env.Event(apitest.Node("A"), "GET", "/v1/queue", nil)
	queue := events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"content-type": "application/json"}, Body: `{"queue":[]}`}
	if found := contract.Check(asNode, queue); !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, "node principal") }) {
		t.Errorf("GET /v1/queue answered 200 to a node: found %q", found)
	}
}

func lambdaResponse(r apitest.Response) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: r.Status, Headers: r.Headers, Body: string(r.Body)}
}

package gateway_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/gateway"
	"mediator/shared/httpapi"
)

// capture serves every function with a handler that records the event it was given.
func capture(t *testing.T) (*gateway.Gateway, *events.APIGatewayV2HTTPRequest) {
	t.Helper()
	var got events.APIGatewayV2HTTPRequest
	h := func(_ context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		got = ev
		return events.APIGatewayV2HTTPResponse{StatusCode: 202, Headers: map[string]string{"content-type": "application/json"}, Body: `{"ok":true}`}, nil
	}
	fns := map[string]httpapi.Handler{}
	for _, r := range httpapi.Routes {
		fns[r.Function] = h
	}
	return &gateway.Gateway{Routes: httpapi.Routes, Functions: fns, Tokens: gateway.DevTokens()}, &got
}

// The gateway builds the request API Gateway would send: route key, path parameters,
// lower-cased headers, raw query, a request id, and the principal in the authorizer context.
func TestEventIsWhatAPIGatewaySends(t *testing.T) {
	t.Parallel()
	gw, got := capture(t)
	req := httptest.NewRequest("POST", "/v1/runs/r-1/steps/flash/result?x=1&x=2&y=3", strings.NewReader(`{"status":"started"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer dev-node-board-7")
	req.Header.Set("X-Trace", "abc")
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, req)

	if rec.Code != 202 || rec.Body.String() != `{"ok":true}` {
		t.Fatalf("response %d %q", rec.Code, rec.Body.String())
	}
	if got.Version != "2.0" || got.RouteKey != "POST /v1/runs/{run_id}/steps/{step_id}/result" || got.RequestContext.RouteKey != got.RouteKey {
		t.Fatalf("route key %q", got.RouteKey)
	}
	if got.PathParameters["run_id"] != "r-1" || got.PathParameters["step_id"] != "flash" {
		t.Fatalf("path parameters %v", got.PathParameters)
	}
	if got.Headers["x-trace"] != "abc" || got.Headers["content-type"] != "application/json" {
		t.Fatalf("headers %v", got.Headers)
	}
	if got.RawQueryString != "x=1&x=2&y=3" || got.QueryStringParameters["x"] != "1,2" {
		t.Fatalf("query %q %v", got.RawQueryString, got.QueryStringParameters)
	}
	if got.Body != `{"status":"started"}` || got.IsBase64Encoded {
		t.Fatalf("body %q base64=%v", got.Body, got.IsBase64Encoded)
	}
	if !strings.HasPrefix(got.RequestContext.RequestID, "local-") || got.RequestContext.HTTP.Method != "POST" {
		t.Fatalf("request context %+v", got.RequestContext)
	}
	if a := got.RequestContext.Authorizer; a == nil || a.Lambda["kind"] != "node" || a.Lambda["id"] != "board-7" {
		t.Fatalf("authorizer %+v", a)
	}
}

func TestBinaryBodyIsBase64(t *testing.T) {
	t.Parallel()
	gw, got := capture(t)
	raw := []byte{0xff, 0xfe, 0x00, 0x01}
	req := httptest.NewRequest("POST", "/v1/runs", strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/octet-stream")
	gw.ServeHTTP(httptest.NewRecorder(), req)
	if !got.IsBase64Encoded || got.Body != base64.StdEncoding.EncodeToString(raw) {
		t.Fatalf("binary body: base64=%v %q", got.IsBase64Encoded, got.Body)
	}
}

func TestUnknownRouteAndNoToken(t *testing.T) {
	t.Parallel()
	gw, got := capture(t)
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest("PATCH", "/v1/runs", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("PATCH /v1/runs: %d", rec.Code)
	}
	req := httptest.NewRequest("GET", "/v1/queue", nil)
	req.Header.Set("Authorization", "Bearer not-a-token")
	gw.ServeHTTP(httptest.NewRecorder(), req)
	if got.RequestContext.Authorizer != nil {
		t.Fatalf("an unknown token got a principal: %+v", got.RequestContext.Authorizer)
	}
}

func TestDevTokens(t *testing.T) {
	t.Parallel()
	tokens := gateway.DevTokens()
	for header, want := range map[string]string{
		"Bearer dev-admin":        "admin:dev-admin",
		"Bearer dev-client":       "client:dev-client",
		"Bearer dev-client-alice": "client:alice",
		"Bearer dev-node-n1":      "node:n1",
	} {
		p, ok := tokens.Authenticate(header)
		if !ok || p.Owner() != want {
			t.Errorf("%s: %v %v, want %s", header, p, ok, want)
		}
	}
	for _, header := range []string{"", "Bearer ", "Basic dev-admin", "Bearer dev-admin2", "Bearer dev-node-"} {
		if p, ok := tokens.Authenticate(header); ok {
			t.Errorf("%q authenticated as %v", header, p)
		}
	}
}

func TestTokensFileHoldsOnlyDigests(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/tokens"
	// sha256("s3cret")
	content := "# ops\n" +
		"sha256:1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0 admin ops\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tokens.Authenticate("Bearer s3cret"); !ok || p.Owner() != "admin:ops" {
		t.Fatalf("file token: %v %v", p, ok)
	}
	if _, ok := tokens.Authenticate("Bearer dev-admin"); ok {
		t.Fatal("a tokens file must replace the development defaults")
	}
}

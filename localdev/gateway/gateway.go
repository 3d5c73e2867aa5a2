// Package gateway serves Mediator's handlers over plain HTTP for local development, doing what
// API Gateway (HTTP API, payload 2.0) does in AWS: match the route, turn the request into an
// events.APIGatewayV2HTTPRequest, authorize the caller, invoke the function's handler — the
// same handler value the Lambda main passes to lambda.Start — and write its response back.
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/auth"
	"mediator/shared/httpapi"
)

// maxPayload is API Gateway's own request limit; the handlers enforce MAX_BODY_BYTES.
const maxPayload = 10 << 20

// Gateway routes requests to function handlers by the shared route table.
type Gateway struct {
	Routes    []httpapi.Route
	Functions map[string]httpapi.Handler // by function name
	// Tokens authorize every route by the development bearer tokens: what the function sees
	// is the principal the token names, and an unknown token reaches it with no principal.
	Tokens *Tokens
	// JWT, when set, authorizes the people's routes (httpapi.PeopleCaller) as API Gateway's JWT
	// authorizer does in a stack with AuthorizerType=JWT, refusing what it refuses before any
	// function runs. The nodes' routes keep Tokens, standing in for IAM, which authorizes them
	// in every stack; the routes for anyone get no principal.
	JWT *JWTAuthorizer
	Log *slog.Logger
	// Extra serves local-only routes (POST /local/reap) that never exist in AWS.
	Extra map[string]http.HandlerFunc
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := g.Extra[r.Method+" "+r.URL.Path]; ok {
		h(w, r)
		return
	}
	route, params, ok := g.Match(r.Method, r.URL.Path)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
		return
	}
	fn := g.Functions[route.Function]
	if fn == nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"message": "function " + route.Function + " is not served"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPayload+1))
	if err != nil || len(body) > maxPayload {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"message": "Request Entity Too Large"})
		return
	}
	authorizer, refused := g.authorize(r.Context(), route, r.Header.Get("Authorization"))
	if refused != nil {
		refused.write(w)
		return
	}
	event := g.Event(r, route, params, body)
	event.RequestContext.Authorizer = authorizer
	// API Gateway does not cancel a function when its client hangs up: neither does this.
	resp, err := fn(context.WithoutCancel(r.Context()), event)
	if err != nil {
		g.Log.Error("handler error", "route", route.Key(), "error", err.Error())
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "Internal Server Error"})
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		out, _ = base64.StdEncoding.DecodeString(resp.Body)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// Event builds the request API Gateway would send for r, without the authorizer's part.
func (g *Gateway) Event(r *http.Request, route httpapi.Route, params map[string]string, body []byte) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	for k, vs := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	query := map[string]string{}
	for k, vs := range r.URL.Query() {
		query[k] = strings.Join(vs, ",")
	}
	now := time.Now()
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              route.Key(),
		RawPath:               r.URL.Path,
		RawQueryString:        r.URL.RawQuery,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:  route.Key(),
			AccountID: "000000000000",
			Stage:     "$default",
			RequestID: requestID(),
			APIID:     "local",
			Time:      now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch: now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: r.URL.Path, Protocol: r.Proto,
				SourceIP: sourceIP(r.RemoteAddr), UserAgent: r.UserAgent(),
			},
		},
	}
	if len(query) == 0 {
		ev.QueryStringParameters = nil
	}
	if len(params) == 0 {
		ev.PathParameters = nil
	}
	// API Gateway hands text bodies over as they are and anything else base64-encoded.
	if len(body) > 0 {
		if utf8.Valid(body) && textual(headers["content-type"]) {
			ev.Body = string(body)
		} else {
			ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return ev
}

// authorize is the authorizer of route: the context the function is given, or the answer
// that refuses the request before it.
func (g *Gateway) authorize(ctx context.Context, route httpapi.Route, header string) (*events.APIGatewayV2HTTPRequestContextAuthorizerDescription, *refusal) {
	if g.JWT != nil {
		switch route.Caller {
		case httpapi.PeopleCaller:
			return g.JWT.Authorize(ctx, header, auth.Scopes)
		case httpapi.AnyoneCaller:
			return nil, nil
		}
	}
	if g.Tokens != nil {
		if p, ok := g.Tokens.Authenticate(header); ok {
			return p.Authorizer(), nil
		}
	}
	return nil, nil
}

// Request builds the event API Gateway would send for method and target (path and query)
// with a JSON body, as who: what tests and benchmarks send the handlers directly.
func (g *Gateway) Request(who auth.Principal, method, target string, body []byte) (events.APIGatewayV2HTTPRequest, httpapi.Route, error) {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, ok := g.Match(method, req.URL.Path)
	if !ok {
		return events.APIGatewayV2HTTPRequest{}, route, fmt.Errorf("no route for %s %s", method, req.URL.Path)
	}
	ev := g.Event(req, route, params, body)
	if who.Kind != "" {
		ev.RequestContext.Authorizer = who.Authorizer()
	}
	return ev, route, nil
}

func textual(contentType string) bool {
	ct := strings.ToLower(contentType)
	return ct == "" || strings.HasPrefix(ct, "text/") || strings.Contains(ct, "json") || strings.Contains(ct, "xml")
}

// Match finds the route for a method and path, with its path parameters.
func (g *Gateway) Match(method, path string) (httpapi.Route, map[string]string, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, rt := range g.Routes {
		if rt.Method != method {
			continue
		}
		if params, ok := matchPath(strings.Split(strings.Trim(rt.Path, "/"), "/"), segs); ok {
			return rt, params, true
		}
	}
	return httpapi.Route{}, nil, false
}

// matchPath matches a path's segments to a route's. A last segment {name+} is API Gateway's
// greedy variable: it takes one or more segments, joined by "/" (/console/{proxy+} matches
// /console/runs/r1 with proxy "runs/r1", not /console itself).
func matchPath(pattern, segs []string) (map[string]string, bool) {
	params := map[string]string{}
	if n := len(pattern); n > 0 && strings.HasPrefix(pattern[n-1], "{") && strings.HasSuffix(pattern[n-1], "+}") {
		if len(segs) < n || strings.Join(segs[n-1:], "") == "" {
			return nil, false
		}
		params[pattern[n-1][1:len(pattern[n-1])-2]] = strings.Join(segs[n-1:], "/")
		pattern, segs = pattern[:n-1], segs[:n-1]
	}
	if len(pattern) != len(segs) {
		return nil, false
	}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return nil, false
			}
			params[p[1:len(p)-1]] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

func sourceIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

func requestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "local-" + hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, body map[string]string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// Ticker invokes fn every period until ctx ends: the local stand-in for an EventBridge rule.
func Ticker(ctx context.Context, period time.Duration, fn func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

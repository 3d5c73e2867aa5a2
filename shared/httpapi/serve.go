package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/auth"
	"mediator/shared/config"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/store"
)

// Handler is the signature lambda.Start takes for an HTTP API (payload 2.0) function.
type Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Deps is what every handler is built from.
type Deps struct {
	Store  *store.Store
	Config config.Config
	Log    *slog.Logger
	Roles  auth.IAMRoles
}

// call is one request as an endpoint sees it.
type call struct {
	ctx   context.Context
	d     Deps
	req   events.APIGatewayV2HTTPRequest
	who   auth.Principal
	runID string // for the log line
}

// reply is an endpoint's answer.
type reply struct {
	status int
	body   any
}

// endpoint serves one route. Public endpoints (healthz) need no principal.
type endpoint struct {
	public bool
	serve  func(*call) (reply, error)
}

// handler turns a function's endpoints into one Lambda handler: it finds the route, the
// principal and the request id, runs the endpoint, and writes one log line per invocation.
// A panic becomes a 500 whose body says nothing about why; the log has the stack.
func handler(d Deps, endpoints map[string]endpoint) Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
		start := time.Now()
		c := &call{ctx: ctx, d: d, req: req}
		defer func() {
			if p := recover(); p != nil {
				d.Log.Error("panic", "request_id", req.RequestContext.RequestID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = c.problem(problem.New(problem.Internal, "")), nil
			}
			d.Log.Info("request", "request_id", req.RequestContext.RequestID, "route", req.RouteKey,
				"status", resp.StatusCode, "run_id", c.runID, "principal", c.principal(),
				"duration_ms", float64(time.Since(start).Microseconds())/1000)
		}()
		ep, ok := endpoints[req.RouteKey]
		if !ok {
			return c.problem(problem.New(problem.NotFound, "no such route")), nil
		}
		if !ep.public {
			who, ok := auth.FromRequest(req, d.Roles)
			if !ok {
				return c.problem(problem.New(problem.Unauthenticated, "present credentials for this API")), nil
			}
			c.who = who
		}
		r, err := ep.serve(c)
		if err != nil {
			return c.problem(c.toProblem(err)), nil
		}
		return c.json(r.status, r.body), nil
	}
}

func (c *call) principal() string {
	if c.who.Kind == "" {
		return ""
	}
	return c.who.Owner()
}

// errorCodes is the one table from the store's errors to problem codes; problem's own table
// gives each code its status.
var errorCodes = []struct {
	err  error
	code string
}{
	{store.ErrNotFound, problem.NotFound},
	{store.ErrRunIDConflict, problem.RunIDConflict},
	{store.ErrStaleAssignment, problem.StaleAssignment},
	{store.ErrNotRunnable, problem.NotRunnable},
	{store.ErrResultConflict, problem.ResultConflict},
	{store.ErrRunNotLive, problem.RunNotLive},
	{context.DeadlineExceeded, problem.Unavailable},
	{store.ErrRetry, problem.Unavailable},
}

func (c *call) toProblem(err error) *problem.Problem {
	var p *problem.Problem
	if errors.As(err, &p) {
		return p
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			p := problem.New(e.code, "")
			if ended := (*store.RunNotLiveError)(nil); errors.As(err, &ended) {
				p.Run = ended.Run
			}
			return p
		}
	}
	// Anything else is ours to fix, and its text may name SQL: it goes to the log only.
	c.d.Log.Error("unhandled error", "request_id", c.req.RequestContext.RequestID, "route", c.req.RouteKey, "error", err.Error())
	if store.Unreachable(err) {
		return problem.New(problem.Unavailable, "the database cannot be reached")
	}
	return problem.New(problem.Internal, "")
}

func (c *call) problem(p *problem.Problem) events.APIGatewayV2HTTPResponse {
	p.RequestID = c.req.RequestContext.RequestID
	return c.respond(p.Status, "application/problem+json", p)
}

func (c *call) json(status int, body any) events.APIGatewayV2HTTPResponse {
	return c.respond(status, "application/json", body)
}

func (c *call) respond(status int, contentType string, body any) events.APIGatewayV2HTTPResponse {
	b, err := json.Marshal(body)
	if err != nil {
		status, contentType = http.StatusInternalServerError, "application/problem+json"
		b, _ = json.Marshal(problem.New(problem.Internal, ""))
	}
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"content-type": contentType, "cache-control": "no-store"},
		Body:       string(b),
	}
}

// body returns the request body, decoded from base64 when API Gateway encoded it, refusing
// (413) anything over MAX_BODY_BYTES — before decoding, so a small base64 body cannot expand
// past the limit unseen — and (415) a body declared as something other than JSON.
func (c *call) body() ([]byte, error) {
	limit := c.d.Config.MaxBodyBytes
	if ct := header(c.req, "content-type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !isJSONSuffix(mt)) {
			return nil, problem.New(problem.UnsupportedMediaType, "send the body as application/json")
		}
	}
	raw := c.req.Body
	if !c.req.IsBase64Encoded {
		if len(raw) > limit {
			return nil, tooLarge(limit)
		}
		return []byte(raw), nil
	}
	if base64.StdEncoding.DecodedLen(len(raw)) > limit+2 {
		return nil, tooLarge(limit)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, problem.Invalid([]problem.FieldError{{Path: "", Message: "the body is not valid base64"}})
	}
	if len(b) > limit {
		return nil, tooLarge(limit)
	}
	return b, nil
}

func tooLarge(limit int) error {
	return problem.New(problem.PayloadTooLarge, fmt.Sprintf("the body must be at most %d bytes", limit))
}

func isJSONSuffix(mt string) bool {
	return len(mt) > 5 && mt[len(mt)-5:] == "+json"
}

// header reads a header; API Gateway lower-cases header names in payload 2.0.
func header(req events.APIGatewayV2HTTPRequest, name string) string {
	if v, ok := req.Headers[name]; ok {
		return v
	}
	for k, v := range req.Headers {
		if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(name) {
			return v
		}
	}
	return ""
}

// wake runs WakeQueued after the handler's own commit, preferring the nodes it names. Its
// failure is logged and never changes the answer: the client's request already succeeded.
func (c *call) wake(prefer ...string) store.WakeResult {
	res, err := c.d.Store.WakeQueued(c.ctx, prefer...)
	if err != nil {
		c.d.Log.Warn("wake failed", "request_id", c.req.RequestContext.RequestID, "route", c.req.RouteKey, "error", err.Error())
		return store.WakeResult{}
	}
	if res.Promoted > 0 {
		c.d.Log.Info("wake", "request_id", c.req.RequestContext.RequestID, "promoted", res.Promoted)
	}
	return res
}

// allow refuses (403) a principal of any other kind.
func (c *call) allow(kinds ...auth.Kind) error {
	for _, k := range kinds {
		if c.who.Kind == k {
			return nil
		}
	}
	return problem.New(problem.Forbidden, "this route is not for a "+string(c.who.Kind)+" principal")
}

// flag reads a boolean query parameter.
func (c *call) flag(name string) (bool, error) {
	switch c.req.QueryStringParameters[name] {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, problem.Invalid([]problem.FieldError{{Path: name, Message: "must be true or false"}})
}

// viewer is who reads runs: clients see their own, admins everything.
func (c *call) viewer() store.Viewer {
	return store.Viewer{Owner: c.who.Owner(), Admin: c.who.IsAdmin()}
}

// pathID reads an identifier from the path, by the pattern it was stored under (IDPattern
// unless given); one that could never have been stored is simply not found. A run_id goes
// into the call's log line.
func (c *call) pathID(name string, pattern ...*regexp.Regexp) (string, error) {
	v, re := c.req.PathParameters[name], request.IDPattern
	if len(pattern) > 0 {
		re = pattern[0]
	}
	if !re.MatchString(v) {
		return "", problem.New(problem.NotFound, "")
	}
	if name == "run_id" {
		c.runID = v
	}
	return v, nil
}

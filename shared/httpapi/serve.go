package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/publish"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Handler is the signature lambda.Start takes for an HTTP API (payload 2.0) function.
type Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// call is one request as an endpoint sees it.
type call struct {
	ctx   context.Context
	d     startup.Deps
	req   events.APIGatewayV2HTTPRequest
	who   auth.Principal
	runID string            // for the log line
	query map[string]string // the query parameters, each once and declared by the endpoint
	hints []string          // nodes to tell to look now after the commit (hint.go)
}

// reply is an endpoint's answer.
type reply struct {
	status int
	body   any
}

// endpoint serves one route. Public endpoints (healthz) need no principal. query lists the
// query parameters it reads; any other is refused, so a misspelt one is not silently ignored.
type endpoint struct {
	public bool
	query  []string
	// anyQuery takes any query string unread: the console's pages, which the browser loads
	// with whatever the address holds (an OAuth callback's code and state, a view's filter).
	anyQuery bool
	serve    func(*call) (reply, error)
	// page, instead of serve, answers a whole response as it goes out, not JSON: the console's
	// files.
	page func(*call) events.APIGatewayV2HTTPResponse
}

// ServerTimingMetric names the handler's own time in every answer's Server-Timing header
// (`handler;dur=0.842`, in ms): from the handler's entry to its answer — the wait for a pool
// connection, every statement, the commit, the wake and the hints — and not API Gateway's or
// the network's part. A client's time less it is what the way there and back cost; the fleet
// benchmark reads it to tell the server's tail from its load generator's.
const ServerTimingMetric = "handler"

// handler turns a function's endpoints into one Lambda handler: it finds the route, the
// principal and the request id, runs the endpoint, and writes one log line per invocation.
// A panic becomes a 500 whose body says nothing about why; the log has the stack.
//
// Each request runs under one deadline (config.Database.RequestDeadline) that covers the wait
// for a pool connection, every statement, the COMMIT and the wake: a row held elsewhere, or a
// pool with no connection free, costs a client a 503 within it, never a wait without end that
// fills the pool for everyone else. The wake only logs its failures, so a deadline that passes
// there still answers what was committed.
func handler(d startup.Deps, endpoints map[string]endpoint) Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(ctx, d.Config.Database.RequestDeadline())
		defer cancel()
		c := &call{ctx: ctx, d: d, req: req}
		defer func() {
			if p := recover(); p != nil {
				d.Log.Error("panic", "request_id", req.RequestContext.RequestID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = c.problem(problem.New(problem.Internal, "")), nil
			}
			took := float64(time.Since(start).Microseconds()) / 1000
			if resp.Headers == nil {
				resp.Headers = map[string]string{}
			}
			resp.Headers["server-timing"] = fmt.Sprintf("%s;dur=%.3f", ServerTimingMetric, took)
			d.Log.Info("request", "request_id", req.RequestContext.RequestID, "route", req.RouteKey,
				"status", resp.StatusCode, "run_id", c.runID, "principal", c.principal(),
				"duration_ms", took)
		}()
		ep, ok := endpoints[req.RouteKey]
		if !ok {
			return c.problem(problem.New(problem.NotFound, "no such route")), nil
		}
		if !ep.public {
			who, ok := auth.FromRequest(req, d.Config.Auth)
			if !ok {
				return c.problem(problem.New(problem.Unauthenticated, "present credentials for this API")), nil
			}
			c.who = who
		}
		if !ep.anyQuery {
			query, bad := parseQuery(req, ep.query)
			if bad != nil {
				return c.problem(bad), nil
			}
			c.query = query
		}
		if ep.page != nil {
			return ep.page(c), nil
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

func (c *call) toProblem(err error) *problem.Problem {
	p, known := ProblemFor(err)
	if !known {
		// Ours to fix, and its text may name SQL: it goes to the log only, with the statement
		// that failed when a statement did.
		var failed *store.StatementError
		statement := ""
		if errors.As(err, &failed) {
			statement = failed.Statement
		}
		c.d.Log.Error("unhandled error", "request_id", c.req.RequestContext.RequestID, "route", c.req.RouteKey,
			"statement", statement, "error", err.Error())
	}
	return p
}

// ProblemFor is what a client is told of err: a problem an endpoint raised; the problem a
// store error names (store.Error's Code: shared/problem's one table gives it its status); 503
// for a deadline passed. Anything else — and a store error that means a bug — is 500 internal,
// and not known: the caller logs it.
func ProblemFor(err error) (p *problem.Problem, known bool) {
	var refused *store.Error
	switch {
	case errors.As(err, &p):
		return p, true
	case errors.Is(err, context.DeadlineExceeded):
		return problem.New(problem.Unavailable, ""), true
	case errors.As(err, &refused) && refused.Code != problem.Internal:
		p := problem.New(refused.Code, "")
		if ended := (*store.RunNotLiveError)(nil); errors.As(err, &ended) {
			p.Run = ended.Run
		}
		if ambiguous := (*store.RunIDAmbiguousError)(nil); errors.As(err, &ambiguous) {
			p.Owners = ambiguous.Owners
		}
		return p, true
	}
	return problem.New(problem.Internal, ""), false
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
	headers := map[string]string{"content-type": contentType, "cache-control": "no-store"}
	if status == http.StatusServiceUnavailable {
		// Transient by definition, problem or not (a schema behind is fixed by a deploy's
		// migration): say when to come back, and clients back off from there.
		headers["retry-after"] = problem.RetryAfterSeconds
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: headers, Body: string(b)}
}

// body returns the request body, decoded from base64 when API Gateway encoded it, refusing
// (415) a body that cannot be read as it is declared (unreadable) and (413) anything over
// MAX_BODY_BYTES — before decoding, so a small base64 body cannot expand past the limit unseen.
func (c *call) body() ([]byte, error) {
	if p := unreadable(c.req); p != nil {
		return nil, p
	}
	limit := c.d.Config.MaxBodyBytes
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

// sendJSON is what a client is told to send instead of a body it cannot have read.
const sendJSON = "send the body as application/json; charset=utf-8, uncompressed"

// unreadable is the problem (415) with a body declared as something the handlers do not read
// it as — UTF-8 JSON, as it arrives — or nil: a Content-Encoding other than identity (nothing
// decodes it: a gzipped body would be parsed as its compressed bytes), a Content-Type other
// than application/json (a +json type promises a meaning of its own), or a charset other than
// UTF-8 (ISO-8859-1 bytes would be refused as bad UTF-8, or read as other characters). A body
// that declares no Content-Type is read as JSON.
func unreadable(req events.APIGatewayV2HTTPRequest) *problem.Problem {
	if enc := strings.TrimSpace(header(req, "content-encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		return problem.New(problem.UnsupportedMediaType, "a Content-Encoding is not decoded here: "+sendJSON)
	}
	ct := header(req, "content-type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return problem.New(problem.UnsupportedMediaType, "the body must be JSON: "+sendJSON)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return problem.New(problem.UnsupportedMediaType, "the body must be UTF-8: "+sendJSON)
	}
	return nil
}

func tooLarge(limit int) error {
	return problem.New(problem.PayloadTooLarge, fmt.Sprintf("the body must be at most %d bytes", limit))
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

// wake runs WakeQueued after the handler's own commit. Its failure is logged and never changes
// the answer: the client's request already succeeded.
func (c *call) wake(p store.WakeParams) store.WakeResult {
	res, err := c.d.Store.WakeQueued(c.ctx, p)
	if err != nil {
		c.d.Log.Warn("wake failed", "request_id", c.req.RequestContext.RequestID, "route", c.req.RouteKey, "error", err.Error())
		return store.WakeResult{}
	}
	if res.Promoted > 0 {
		c.d.Log.Info("wake", "request_id", c.req.RequestContext.RequestID, "promoted", res.Promoted)
	}
	return res
}

// afterCommit is what a write does once its own transaction committed: wake the queue when
// the write made room (with what it knows of the nodes it freed), tell the nodes given or
// relieved of work to look now (sendHints, within push.Budget), then publish the events of
// the runs it changed and of those the wake promoted, and of the nodes whose health it moved
// (the store's HealthChanged), all within about a second (what it cannot send, the reaper
// does). Neither changes the answer: the client's request already succeeded.
func (c *call) afterCommit(changed []string, madeRoom bool, freed store.WakeParams, moved ...string) store.WakeResult {
	var woke store.WakeResult
	if madeRoom {
		woke = c.wake(freed)
	}
	c.sendHints(woke, freed)
	ctx, cancel := context.WithTimeout(c.ctx, publish.HandlerBudget)
	defer cancel()
	c.d.Publisher.Runs(ctx, append(changed, woke.Runs...)...)
	c.d.Publisher.Nodes(ctx, moved...)
	return woke
}

// allow refuses (403) a principal of any other kind.
func (c *call) allow(kinds ...auth.Kind) error {
	for _, k := range kinds {
		if c.who.Kind == k {
			return nil
		}
	}
	return problem.New(problem.Forbidden, "this route is not for "+string(c.who.Kind)+" principals")
}

// flag reads a boolean query parameter.
func (c *call) flag(name string) (bool, error) {
	switch c.query[name] {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, problem.Invalid([]problem.FieldError{{Path: name, Message: "must be true or false"}})
}

// parseQuery reads the query string as the client wrote it: the event's decoded map cannot
// tell a pair that does not decode (?dry_run=%74rue% would be lost, and the run stored for real)
// or a repeated parameter (joined with commas) from a plain one. Each parameter must be one
// the endpoint declares, given once. The map is read only for an event without the raw
// string (built by hand).
func parseQuery(req events.APIGatewayV2HTTPRequest, accepted []string) (map[string]string, *problem.Problem) {
	values := url.Values{}
	if raw := req.RawQueryString; raw != "" {
		var err error
		if values, err = url.ParseQuery(raw); err != nil {
			return nil, problem.Invalid([]problem.FieldError{malformedQuery(raw)})
		}
	} else {
		for k, v := range req.QueryStringParameters {
			values[k] = []string{v}
		}
	}
	var errs []problem.FieldError
	out := make(map[string]string, len(values))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		switch {
		case !slices.Contains(accepted, name):
			errs = append(errs, problem.FieldError{Path: name, Message: "unknown query parameter"})
		case len(values[name]) > 1:
			errs = append(errs, problem.FieldError{Path: name, Message: "must be given at most once"})
		default:
			out[name] = values[name][0]
		}
	}
	if errs != nil {
		return nil, problem.Invalid(errs)
	}
	return out, nil
}

// malformedQuery names the first pair url.ParseQuery refuses, by its parameter when that
// much can be read.
func malformedQuery(raw string) problem.FieldError {
	for _, pair := range strings.Split(raw, "&") {
		if _, err := url.ParseQuery(pair); err != nil {
			name, _, _ := strings.Cut(pair, "=")
			if n, err := url.QueryUnescape(name); err == nil && !strings.Contains(n, ";") {
				return problem.FieldError{Path: n, Message: "is not a well-formed query parameter (a bad %-escape or a ';')"}
			}
			break
		}
	}
	return problem.FieldError{Path: "", Message: "the query string is malformed (a bad %-escape or a ';')"}
}

// runRef is the run the path's run_id names for this caller: a client's own run of that id; an
// admin's of any owner, of the owner the query names when it does (?owner=, admins only).
func (c *call) runRef() (store.RunRef, error) {
	name, err := c.pathID("run_id")
	if err != nil {
		return store.RunRef{}, err
	}
	ref := store.RunRef{Name: name, Viewer: c.viewer()}
	if owner, given := c.query["owner"]; given {
		switch {
		case !c.who.IsAdmin():
			return store.RunRef{}, problem.New(problem.Forbidden, "only an admin names a run's owner")
		case !auth.OwnerPattern.MatchString(owner):
			return store.RunRef{}, problem.Invalid([]problem.FieldError{{Path: "owner", Message: "must be an owner as runs show it, <kind>:<id>"}})
		}
		ref.Owner = owner
	}
	return ref, nil
}

// viewer is who reads runs: clients see their own, admins everything.
func (c *call) viewer() store.Viewer {
	return store.Viewer{Owner: c.who.Owner(), Admin: c.who.IsAdmin()}
}

// pathID reads an identifier from the path, by the pattern it was stored under (IDPattern
// unless given). One that could never have been stored is a malformed request (400 at the
// parameter's name), not an unknown id: the client learns to fix it rather than look for it.
// A run_id goes into the call's log line.
func (c *call) pathID(name string, pattern ...*regexp.Regexp) (string, error) {
	v, re := c.req.PathParameters[name], wire.IDPattern
	if len(pattern) > 0 {
		re = pattern[0]
	}
	if !re.MatchString(v) {
		return "", problem.Invalid([]problem.FieldError{{Path: name, Message: "must match " + re.String()}})
	}
	if name == "run_id" {
		c.runID = v
	}
	return v, nil
}

package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"mediator/migrations"
	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Query serves the read routes: runs, steps' logs, the queue, the fleet, leases, /healthz,
// the OpenAPI document and the web console.
func Query(d startup.Deps) Handler {
	web := newSite(d)
	return handler(d, map[string]endpoint{
		"GET /console":                              {public: true, anyQuery: true, page: web.page},
		"GET /console/config.json":                  {public: true, page: web.config},
		"GET /console/{proxy+}":                     {public: true, anyQuery: true, page: web.page},
		"GET /healthz":                              {public: true, serve: healthz},
		"GET /v1/openapi.json":                      {public: true, serve: openapiDoc},
		"GET /v1/runs/{run_id}":                     {query: []string{"owner"}, serve: getRun},
		"GET /v1/runs":                              {query: []string{"state", "kind", "priority", "limit", "after"}, serve: listRuns},
		"GET /v1/queue":                             {serve: queue},
		"GET /v1/nodes":                             {query: []string{"limit", "after"}, serve: listNodes},
		"GET /v1/nodes/{node_id}":                   {serve: getNode},
		"GET /v1/health-checks/{name}":              {serve: getHealthCheck},
		"GET /v1/health-checks":                     {serve: listHealthChecks},
		"GET /v1/leases":                            {serve: listLeases},
		"GET /v1/runs/{run_id}/steps/{step_id}/log": {query: []string{"attempt", "owner", "from"}, serve: stepLog},
	})
}

// healthz answers 200 when the database answers and its schema is the one this build
// expects; 503 otherwise, saying which.
func healthz(c *call) (reply, error) {
	version, dirty, err := c.d.Store.SchemaVersion(c.ctx)
	if err != nil {
		return reply{}, err
	}
	body := map[string]any{"status": "ok", "schema_version": version, "expected_schema_version": migrations.Latest()}
	if migrations.Behind(version, dirty) {
		body["status"] = "schema behind: run the migrate function"
		return reply{http.StatusServiceUnavailable, body}, nil
	}
	return reply{http.StatusOK, body}, nil
}

// getRun is the run with its history. Another client's run does not exist (404, not 403).
func getRun(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	ref, err := c.runRef()
	if err != nil {
		return reply{}, err
	}
	run, err := c.d.Store.GetRun(c.ctx, ref)
	if err != nil {
		return reply{}, err
	}
	history, err := c.d.Store.History(c.ctx, run.StoreKey())
	if err != nil {
		return reply{}, err
	}
	runs := []store.Run{run}
	if err := c.explainWaiting(runs); err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, map[string]any{"run": runs[0], "history": history}}, nil
}

func listRuns(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	q := c.query
	p := store.ListRunsParams{Viewer: c.viewer(), State: q["state"], Kind: q["kind"], Limit: 20}
	var errs []problem.FieldError
	if p.State != "" && !slices.Contains(wire.RunStates, p.State) {
		errs = append(errs, problem.FieldError{Path: "state", Message: "must be one of " + strings.Join(wire.RunStates, ", ")})
	}
	if p.Kind != "" && !slices.Contains(wire.RunKinds, p.Kind) {
		errs = append(errs, problem.FieldError{Path: "kind", Message: "must be one of " + strings.Join(wire.RunKinds, ", ")})
	}
	if raw, ok := q["priority"]; ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 || n > wire.MaxPriority {
			errs = append(errs, problem.FieldError{Path: "priority", Message: fmt.Sprintf("must be a whole number from 0 to %d", wire.MaxPriority)})
		}
		p.Priority = &n
	}
	p.Limit = c.pageLimit(p.Limit, wire.MaxPageSize, &errs)
	if raw := q["after"]; raw != "" {
		cur, ok := decodeCursor(raw)
		if !ok {
			errs = append(errs, problem.FieldError{Path: "after", Message: "is not a cursor this API gave out"})
		}
		p.After = cur
	}
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	runs, next, err := c.d.Store.ListRuns(c.ctx, p)
	if err != nil {
		return reply{}, err
	}
	if runs == nil {
		runs = []store.Run{}
	}
	if err := c.explainWaiting(runs); err != nil {
		return reply{}, err
	}
	var nextCursor *string
	if next != nil {
		s := encodeCursor(*next)
		nextCursor = &s
	}
	return reply{http.StatusOK, map[string]any{"runs": runs, "next": nextCursor}}, nil
}

// pageLimit reads a list's limit query parameter: dflt when it is absent, a whole number from 1
// to most when given, else a field error in errs.
func (c *call) pageLimit(dflt, most int, errs *[]problem.FieldError) int {
	raw, ok := c.query["limit"]
	if !ok {
		return dflt
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > most {
		*errs = append(*errs, problem.FieldError{Path: "limit", Message: fmt.Sprintf("must be a whole number from 1 to %d", most)})
	}
	return n
}

// Cursors are opaque to clients: base64url of "<created_at micros>/<name>" (a client's) or
// "<created_at micros>/<name>/<key>" (an admin's). "/" is in neither a name nor a key. A cursor
// "<micros>:<run_id>", from before runs had names, is the run of that name and key.
func encodeCursor(c store.Cursor) string {
	s := strconv.FormatInt(c.CreatedAtMicros, 10) + "/" + c.Name
	if c.Key != "" {
		s += "/" + c.Key
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// maxCursorMicros is the year 10000: a cursor time past it (or before 1970) was never given
// out, and would overflow PostgreSQL's timestamp arithmetic.
const maxCursorMicros = 253402300800000000

func decodeCursor(s string) (*store.Cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	parts := strings.Split(string(raw), "/")
	if len(parts) == 1 { // "<micros>:<run_id>"
		micros, runID, _ := strings.Cut(parts[0], ":")
		parts = []string{micros, runID, runID}
	}
	if len(parts) < 2 || len(parts) > 3 {
		return nil, false
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || n < 0 || n >= maxCursorMicros {
		return nil, false
	}
	c := &store.Cursor{CreatedAtMicros: n, Name: parts[1]}
	if len(parts) == 3 {
		c.Key = parts[2]
	}
	if !wire.IDPattern.MatchString(c.Name) || (c.Key != "" && !wire.IDPattern.MatchString(c.Key)) {
		return nil, false
	}
	return c, true
}

func queue(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	view, err := c.d.Store.Queue(c.ctx, c.viewer())
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, view}, nil
}

// listNodes is the fleet a page at a time, in node_id order (admins). A page ends at limit
// nodes, or before the node that would take its JSON past wire.NodePageBytes: a node's labels
// can be kilobytes, and a Lambda's answer cannot pass 6 MB. Its cursor is the page's last
// node_id, base64url-encoded (a node_id may hold "." and ":", which a cursor does not).
func listNodes(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	var errs []problem.FieldError
	p := store.ListNodesParams{Limit: c.pageLimit(wire.MaxNodePageSize, wire.MaxNodePageSize, &errs)}
	if raw := c.query["after"]; raw != "" {
		id, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || !wire.IDPattern.Match(id) {
			errs = append(errs, problem.FieldError{Path: "after", Message: "is not a cursor this API gave out"})
		}
		p.After = string(id)
	}
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	want := p.Limit
	p.Limit++ // one more than the page: whether another follows
	nodes, err := c.d.Store.ListNodes(c.ctx, p)
	if err != nil {
		return reply{}, err
	}
	page := make([]json.RawMessage, 0, min(len(nodes), want))
	size := 0
	for _, n := range nodes[:min(len(nodes), want)] {
		b, err := json.Marshal(n)
		if err != nil {
			return reply{}, err
		}
		if size += len(b) + 1; size > wire.NodePageBytes && len(page) > 0 {
			break
		}
		page = append(page, b)
	}
	var next *string
	if len(page) < len(nodes) {
		s := base64.RawURLEncoding.EncodeToString([]byte(nodes[len(page)-1].NodeID))
		next = &s
	}
	return reply{http.StatusOK, map[string]any{"nodes": page, "next": next}}, nil
}

// getNode is one node with its recent health changes and leases, newest first (admin).
func getNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	d, err := c.d.Store.GetNode(c.ctx, nodeID)
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, d}, nil
}

func getHealthCheck(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	name, err := c.pathID("name")
	if err != nil {
		return reply{}, err
	}
	check, err := c.d.Store.GetHealthCheck(c.ctx, name)
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, map[string]any{"health_check": check}}, nil
}

func listHealthChecks(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	checks, err := c.d.Store.ListHealthChecks(c.ctx)
	if err != nil {
		return reply{}, err
	}
	if checks == nil {
		checks = []store.HealthCheck{}
	}
	return reply{http.StatusOK, map[string]any{"health_checks": checks}}, nil
}

func listLeases(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	leases, err := c.d.Store.ListLeases(c.ctx)
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, map[string]any{"leases": leases}}, nil
}

// explainWaiting says, on each QUEUED run of runs, why it waits, as the caller may see it.
func (c *call) explainWaiting(runs []store.Run) error {
	return c.d.Store.ExplainWaiting(c.ctx, store.ExplainWaitingParams{Runs: runs, Viewer: c.viewer()})
}

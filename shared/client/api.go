package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/url"
	"strconv"
	"strings"
)

// Operation is one route of the API as this client calls it. Operations is the table a test
// holds against the OpenAPI document and the route table, both ways.
type Operation struct {
	Method string
	Path   string   // as the OpenAPI document writes it: /v1/runs/{run_id}
	Query  []string // the query parameters the method may send
	Accept []int    // the statuses that answer it; any other is an *Error
	Func   string   // the Client method
}

var (
	opSubmit     = Operation{"POST", "/v1/runs", nil, []int{200, 201, 202, 422}, "Submit"}
	opDryRun     = Operation{"POST", "/v1/runs", []string{"dry_run"}, []int{200}, "DryRun"}
	opListRuns   = Operation{"GET", "/v1/runs", []string{"state", "limit", "after", "priority", "kind"}, []int{200}, "ListRuns"}
	opGetRun     = Operation{"GET", "/v1/runs/{run_id}", []string{"owner"}, []int{200}, "GetRun"}
	opCancel     = Operation{"POST", "/v1/runs/{run_id}/cancel", []string{"owner"}, []int{200, 202}, "Cancel"}
	opPriority   = Operation{"POST", "/v1/runs/{run_id}/priority", []string{"owner"}, []int{200}, "SetPriority"}
	opRelease    = Operation{"POST", "/v1/runs/{run_id}/release", []string{"owner"}, []int{200}, "Release"}
	opExtend     = Operation{"POST", "/v1/runs/{run_id}/extend", []string{"owner"}, []int{200}, "Extend"}
	opReport     = Operation{"POST", "/v1/runs/{run_id}/steps/{step_id}/result", nil, []int{200}, "Report"}
	opHeartbeat  = Operation{"PUT", "/v1/nodes/{node_id}", nil, []int{200}, "Heartbeat"}
	opRemoveNode = Operation{"DELETE", "/v1/nodes/{node_id}", nil, []int{200}, "RemoveNode"}
	opDrain      = Operation{"POST", "/v1/nodes/{node_id}/drain", nil, []int{200}, "Drain"}
	opUndrain    = Operation{"DELETE", "/v1/nodes/{node_id}/drain", nil, []int{200}, "Undrain"}
	opListNodes  = Operation{"GET", "/v1/nodes", []string{"limit", "after"}, []int{200}, "ListNodes"}
	opListLeases = Operation{"GET", "/v1/leases", nil, []int{200}, "ListLeases"}
	opQueue      = Operation{"GET", "/v1/queue", nil, []int{200}, "Queue"}
	opHealth     = Operation{"GET", "/healthz", nil, []int{200}, "Health"}
	opOpenAPI    = Operation{"GET", "/v1/openapi.json", nil, []int{200}, "OpenAPI"}
	opLogURLs    = Operation{"POST", "/v1/runs/{run_id}/steps/{step_id}/log-urls", nil, []int{200}, "LogURLs"}
	opStepLog    = Operation{"GET", "/v1/runs/{run_id}/steps/{step_id}/log", []string{"attempt", "owner", "from"}, []int{200}, "StepLog"}
	opGetNode    = Operation{"GET", "/v1/nodes/{node_id}", nil, []int{200}, "GetNode"}
	opQuarantine = Operation{"POST", "/v1/nodes/{node_id}/quarantine", nil, []int{200}, "Quarantine"}
	opUnquaran   = Operation{"DELETE", "/v1/nodes/{node_id}/quarantine", nil, []int{200}, "Unquarantine"}
	opPutCheck   = Operation{"PUT", "/v1/health-checks/{name}", nil, []int{200, 201}, "PutHealthCheck"}
	opGetCheck   = Operation{"GET", "/v1/health-checks/{name}", nil, []int{200}, "GetHealthCheck"}
	opListChecks = Operation{"GET", "/v1/health-checks", nil, []int{200}, "ListHealthChecks"}
	opDelCheck   = Operation{"DELETE", "/v1/health-checks/{name}", nil, []int{200}, "DeleteHealthCheck"}
)

// Operations is every route this client calls.
var Operations = []Operation{
	opSubmit, opDryRun, opListRuns, opGetRun, opCancel, opPriority, opReport, opHeartbeat, opRemoveNode,
	opDrain, opUndrain, opListNodes, opListLeases, opQueue, opHealth, opOpenAPI, opLogURLs, opStepLog,
	opGetNode, opQuarantine, opUnquaran, opPutCheck, opGetCheck, opListChecks, opDelCheck,
	opRelease, opExtend,
}

// call is the operation with its path parameters filled in, in the order the path names them,
// each escaped as one segment.
func (o Operation) call(params ...string) call {
	var b strings.Builder
	rest := o.Path
	for _, p := range params {
		open, end := strings.IndexByte(rest, '{'), strings.IndexByte(rest, '}')
		if open < 0 || end < open {
			panic("client: more parameters than " + o.Path + " names")
		}
		b.WriteString(rest[:open])
		b.WriteString(url.PathEscape(p))
		rest = rest[end+1:]
	}
	if strings.IndexByte(rest, '{') >= 0 {
		panic("client: fewer parameters than " + o.Path + " names")
	}
	b.WriteString(rest)
	return call{method: o.Method, path: b.String(), accept: o.Accept}
}

// encode is a request body: bytes (a []byte or json.RawMessage) go as they are, so what the
// caller wrote is what is sent and signed; anything else is encoded as JSON.
func encode(v any) ([]byte, error) {
	switch b := v.(type) {
	case []byte:
		return b, nil
	case json.RawMessage:
		return b, nil
	}
	return json.Marshal(v)
}

// Submit submits a run (a RunRequest, a map, or the JSON bytes of one). Every answer that
// carries the run is a result, not an error: 201 placed, 202 queued, 200 the same request as
// before, 422 refused with the unmet roles. Submitting again after a lost answer is safe: the
// run_id makes it the same request.
func (c *Client) Submit(ctx context.Context, run any) (*Submitted, error) {
	body, err := encode(run)
	if err != nil {
		return nil, err
	}
	out := &Submitted{}
	k := opSubmit.call()
	k.body = body
	return out, c.do(ctx, k, out)
}

// DryRun asks what a submit would do now (placeable, busy, impossible or too_wide), storing
// nothing.
func (c *Client) DryRun(ctx context.Context, run any) (*Verdict, error) {
	body, err := encode(run)
	if err != nil {
		return nil, err
	}
	out := &Verdict{}
	k := opDryRun.call()
	k.query, k.body = url.Values{"dry_run": {"true"}}, body
	return out, c.do(ctx, k, out)
}

// GetRun reads a run with its history.
func (c *Client) GetRun(ctx context.Context, runID string) (*RunDetail, error) {
	out := &RunDetail{}
	return out, c.do(ctx, c.ofOwner(opGetRun.call(runID)), out)
}

// ForOwner is c naming the runs of owner ("client:alice"): an admin's way to say whose run an
// id means when runs of several owners have it (409 run_id_ambiguous otherwise). Only the
// calls that name a run by its id (GetRun, Cancel, SetPriority, Release, Extend, StepLog)
// send it.
func (c *Client) ForOwner(owner string) *Client {
	o := *c
	o.owner = owner
	return &o
}

// ofOwner adds ForOwner's owner to a call that names a run.
func (c *Client) ofOwner(k call) call {
	if c.owner != "" {
		k.query = url.Values{"owner": {c.owner}}
	}
	return k
}

// ListRuns reads one page of runs.
func (c *Client) ListRuns(ctx context.Context, p ListRunsParams) (*RunPage, error) {
	q := url.Values{}
	if p.State != "" {
		q.Set("state", p.State)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Priority != nil {
		q.Set("priority", strconv.Itoa(*p.Priority))
	}
	if p.Kind != "" {
		q.Set("kind", p.Kind)
	}
	out := &RunPage{}
	k := opListRuns.call()
	k.query = q
	return out, c.do(ctx, k, out)
}

// RunPages follows the pagination from p, one page at a time, until the last page or the
// first error (yielded, and then the walk ends).
func (c *Client) RunPages(ctx context.Context, p ListRunsParams) iter.Seq2[*RunPage, error] {
	return func(yield func(*RunPage, error) bool) {
		for {
			page, err := c.ListRuns(ctx, p)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.Next == nil {
				return
			}
			p.After = *page.Next
		}
	}
}

// Cancel cancels a run: 200 when it is CANCELLED now, 202 when its nodes were asked to stop.
// A finished run is an *Error with Code run_not_live and the Run as it ended.
func (c *Client) Cancel(ctx context.Context, runID string, r CancelRequest) (*CancelReply, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &CancelReply{}
	k := c.ofOwner(opCancel.call(runID))
	k.body = body
	return out, c.do(ctx, k, out)
}

// SetPriority changes a queued run's priority (admins); the queue is woken before the answer,
// so a raised run may come back placed. A run no longer queued is 409 run_not_queued.
func (c *Client) SetPriority(ctx context.Context, runID string, priority int) (*RunReply, error) {
	body, err := json.Marshal(map[string]int{"priority": priority})
	if err != nil {
		return nil, err
	}
	out := &RunReply{}
	k := c.ofOwner(opPriority.call(runID))
	k.body = body
	return out, c.do(ctx, k, out)
}

// Release ends a hold: a RUNNING one SUCCEEDED, its nodes freed for the queue; a QUEUED one
// CANCELLED. A hold that ended is an *Error with Code run_not_live and the Run as it ended; a
// run of another kind is 409 not_a_hold.
func (c *Client) Release(ctx context.Context, runID string) (*RunReply, error) {
	out := &RunReply{}
	return out, c.do(ctx, c.ofOwner(opRelease.call(runID)), out)
}

// Extend gives a hold seconds more: a RUNNING hold's end moves later (to at most the
// deployment's MAX_HOLD_SECONDS from now), a QUEUED hold's length grows (up to that maximum).
// Errors as Release's.
func (c *Client) Extend(ctx context.Context, runID string, seconds int) (*RunReply, error) {
	body, err := json.Marshal(map[string]int{"seconds": seconds})
	if err != nil {
		return nil, err
	}
	out := &RunReply{}
	k := c.ofOwner(opExtend.call(runID))
	k.body = body
	return out, c.do(ctx, k, out)
}

// Report sends a node's step report, fenced by the lease's epoch: a 409 stale_assignment means
// the work is no longer this node's. Sending the same report again is safe.
func (c *Client) Report(ctx context.Context, runID, stepID string, r ReportRequest) (*ReportReply, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &ReportReply{}
	k := opReport.call(runID, stepID)
	k.body = body
	return out, c.do(ctx, k, out)
}

// LogURLs asks for presigned upload URLs for the log of a step the node is running, fenced like
// a report: a 409 stale_assignment means the step is no longer this node's, and a node that
// lost its lease gets no URLs.
func (c *Client) LogURLs(ctx context.Context, runID, stepID string, r LogURLsRequest) (*LogUpload, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &LogUpload{}
	k := opLogURLs.call(runID, stepID)
	k.body = body
	return out, c.do(ctx, k, out)
}

// StepLog is a step's log as it stands: the chunks uploaded so far as presigned GET URLs, in
// order, from p.From on, a page at a time (StepLog.More).
func (c *Client) StepLog(ctx context.Context, runID, stepID string, p StepLogParams) (*StepLog, error) {
	out := &StepLog{}
	k := c.ofOwner(opStepLog.call(runID, stepID))
	if k.query == nil {
		k.query = url.Values{}
	}
	if p.Attempt > 0 {
		k.query.Set("attempt", strconv.Itoa(p.Attempt))
	}
	if p.From > 0 {
		k.query.Set("from", strconv.FormatInt(p.From, 10))
	}
	return out, c.do(ctx, k, out)
}

// Heartbeat advertises a node and renews its lease; the answer is its lease and steps.
func (c *Client) Heartbeat(ctx context.Context, nodeID string, r HeartbeatRequest) (*HeartbeatReply, error) {
	if r.Labels == nil {
		r.Labels = []string{}
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &HeartbeatReply{}
	k := opHeartbeat.call(nodeID)
	k.body = body
	return out, c.do(ctx, k, out)
}

// RemoveNode takes a node out of the fleet (admins).
func (c *Client) RemoveNode(ctx context.Context, nodeID string) (*RemovedNode, error) {
	out := &RemovedNode{}
	return out, c.do(ctx, opRemoveNode.call(nodeID), out)
}

// Drain stops new work going to a node (admins): it finishes the lease it holds, and its own
// heartbeat cannot lift the drain. Draining twice is harmless.
func (c *Client) Drain(ctx context.Context, nodeID string) (*NodeReply, error) {
	out := &NodeReply{}
	return out, c.do(ctx, opDrain.call(nodeID), out)
}

// Undrain lifts an admin's drain (admins); a drain the node asked for itself stays.
func (c *Client) Undrain(ctx context.Context, nodeID string) (*NodeReply, error) {
	out := &NodeReply{}
	return out, c.do(ctx, opUndrain.call(nodeID), out)
}

// ListNodes reads the whole fleet (admins), one page after another to the last.
func (c *Client) ListNodes(ctx context.Context) (*NodeList, error) {
	all := &NodeList{}
	for after := ""; ; {
		page := &NodeList{}
		k := opListNodes.call()
		if after != "" {
			k.query = url.Values{"after": {after}}
		}
		if err := c.do(ctx, k, page); err != nil {
			return page, err
		}
		all.Reply, all.Nodes = page.Reply, append(all.Nodes, page.Nodes...)
		if page.Next == nil {
			return all, nil
		}
		after = *page.Next
	}
}

// GetNode reads one node with its recent health changes and leases, newest first (admins).
func (c *Client) GetNode(ctx context.Context, nodeID string) (*NodeDetail, error) {
	out := &NodeDetail{}
	return out, c.do(ctx, opGetNode.call(nodeID), out)
}

// Quarantine takes a node out of scheduling (admins): it finishes the lease it holds and
// takes no other until an admin lifts the quarantine. Quarantining twice is harmless.
func (c *Client) Quarantine(ctx context.Context, nodeID, reason string) (*NodeReply, error) {
	body, err := json.Marshal(QuarantineRequest{Reason: reason})
	if err != nil {
		return nil, err
	}
	out := &NodeReply{}
	k := opQuarantine.call(nodeID)
	k.body = body
	return out, c.do(ctx, k, out)
}

// Unquarantine lifts a node's quarantine (admins): the health check that applies to it runs
// first, or, where none does, the node is healthy again.
func (c *Client) Unquarantine(ctx context.Context, nodeID string) (*NodeReply, error) {
	out := &NodeReply{}
	return out, c.do(ctx, opUnquaran.call(nodeID), out)
}

// PutHealthCheck registers the health check name, or replaces it (admins). check is a
// HealthCheckRequest, a map, or the JSON bytes of one.
func (c *Client) PutHealthCheck(ctx context.Context, name string, check any) (*HealthCheckReply, error) {
	body, err := encode(check)
	if err != nil {
		return nil, err
	}
	out := &HealthCheckReply{}
	k := opPutCheck.call(name)
	k.body = body
	return out, c.do(ctx, k, out)
}

// GetHealthCheck reads one health check (admins).
func (c *Client) GetHealthCheck(ctx context.Context, name string) (*HealthCheckReply, error) {
	out := &HealthCheckReply{}
	return out, c.do(ctx, opGetCheck.call(name), out)
}

// ListHealthChecks reads every health check (admins).
func (c *Client) ListHealthChecks(ctx context.Context) (*HealthCheckList, error) {
	out := &HealthCheckList{}
	return out, c.do(ctx, opListChecks.call(), out)
}

// DeleteHealthCheck removes a health check (admins); runs of it already placed go on.
func (c *Client) DeleteHealthCheck(ctx context.Context, name string) (*HealthCheckReply, error) {
	out := &HealthCheckReply{}
	return out, c.do(ctx, opDelCheck.call(name), out)
}

// ListLeases reads every lease held (admins).
func (c *Client) ListLeases(ctx context.Context) (*LeaseList, error) {
	out := &LeaseList{}
	return out, c.do(ctx, opListLeases.call(), out)
}

// Queue reads the queue, per kind of run.
func (c *Client) Queue(ctx context.Context) (*QueueReply, error) {
	out := &QueueReply{}
	return out, c.do(ctx, opQueue.call(), out)
}

// Health reads /healthz. A schema behind the code is a 503, retried like any other, then an
// *Error.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	out := &Health{}
	return out, c.do(ctx, opHealth.call(), out)
}

// OpenAPI reads the API's OpenAPI document; the JSON is Body.
func (c *Client) OpenAPI(ctx context.Context) (*Document, error) {
	out := &Document{}
	return out, c.do(ctx, opOpenAPI.call(), out)
}

// UnmarshalJSON leaves the document in Body, as served.
func (d *Document) UnmarshalJSON([]byte) error { return nil }

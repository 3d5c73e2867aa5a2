// Package fleet simulates node agents over Mediator's HTTP API, for the demo, tests and
// benchmarks. A Node heartbeats, runs the steps it is given by sleeping for their
// spec.duration, and reports them under its lease's epoch — the node's protocol (DESIGN.md) as a
// real agent speaks it, with no access to Mediator's internals.
//
// It decodes the wire format with its own types rather than the store's, so that a change to
// what Mediator sends shows up here as a broken simulator instead of being followed silently.
package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// DefaultInterval is how often a Node heartbeats when Interval is zero: far faster than the
// next_heartbeat_seconds Mediator asks for, so a demo does not sit waiting.
const DefaultInterval = 200 * time.Millisecond

// requestTimeout bounds one exchange with Mediator, whatever the Client's own timeout.
const requestTimeout = 10 * time.Second

// Node is one simulated agent. Set the exported fields, then call Run.
type Node struct {
	ID     string
	Labels []string
	Base   string // http://127.0.0.1:port
	Token  string // "dev-node-"+ID under the local gateway's development tokens
	Client *http.Client
	// Interval is the time between heartbeats, also while a step runs; 0 is DefaultInterval.
	Interval time.Duration
	// Log narrates what the node does; nil is quiet.
	Log func(format string, args ...any)

	mu   sync.Mutex
	boot string
}

// HeartbeatReply is Mediator's answer to a heartbeat.
type HeartbeatReply struct {
	Status               int      `json:"-"` // the HTTP status (always 200: other answers are errors)
	Node                 NodeInfo `json:"node"`
	Lease                *Lease   `json:"lease"`
	Steps                []Step   `json:"steps"`
	NextHeartbeatSeconds int      `json:"next_heartbeat_seconds"`
}

// NodeInfo is the node as Mediator recorded it.
type NodeInfo struct {
	NodeID   string   `json:"node_id"`
	State    string   `json:"state"`
	Labels   []string `json:"labels"`
	BootID   string   `json:"boot_id"`
	Draining bool     `json:"draining"`
}

// Lease is the run this node holds, and the epoch its reports are fenced by.
type Lease struct {
	RunID     string    `json:"run_id"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Step is a step the node holds, with what it may do about it.
type Step struct {
	RunID    string          `json:"run_id"`
	StepID   string          `json:"step_id"`
	Spec     json.RawMessage `json:"spec"`
	State    string          `json:"state"`
	Runnable bool            `json:"runnable"`
	Cancel   bool            `json:"cancel"`
}

// ReportReply is Mediator's answer to a step report.
type ReportReply struct {
	RunID     string `json:"run_id"`
	StepID    string `json:"step_id"`
	StepState string `json:"step_state"`
	RunState  string `json:"run_state"`
	// Next are steps this node may start now, without waiting for a heartbeat.
	Next []Step `json:"next"`
}

// StatusError is a non-2xx answer, with the problem code Mediator gave (stale_assignment, …).
type StatusError struct {
	Method, Path string
	Status       int
	Code         string
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, e.Code)
}

// Boot starts a new life of the agent: a fresh boot_id, which Mediator reads as a restart on
// the next heartbeat if the node held a lease under the old one.
func (n *Node) Boot() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	boot := n.ID + "-" + hex.EncodeToString(b)
	n.mu.Lock()
	n.boot = boot
	n.mu.Unlock()
	return boot
}

// Restart simulates the agent restarting: a new boot_id. Work in flight is dropped as soon as
// the next heartbeat shows the lease it ran under is gone.
func (n *Node) Restart() string {
	boot := n.Boot()
	n.logf("restarted as boot %s", boot)
	return boot
}

// BootID is the current boot_id ("" before Boot).
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boot
}

// Heartbeat advertises the node under its current boot (booting first if it never has).
func (n *Node) Heartbeat(ctx context.Context) (HeartbeatReply, error) {
	boot := n.BootID()
	if boot == "" {
		boot = n.Boot()
	}
	labels := n.Labels
	if labels == nil {
		labels = []string{}
	}
	var reply HeartbeatReply
	body := map[string]any{"boot_id": boot, "labels": labels, "draining": false}
	status, err := n.call(ctx, http.MethodPut, "/v1/nodes/"+url.PathEscape(n.ID), body, &reply)
	reply.Status = status
	return reply, err
}

// Run heartbeats every Interval and works through the runnable steps each reply hands out,
// one at a time, until ctx ends. Errors are logged and the loop goes on, as an agent would.
func (n *Node) Run(ctx context.Context) {
	for ctx.Err() == nil {
		hb, err := n.Heartbeat(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			n.logf("heartbeat: %v", err)
		default:
			n.work(ctx, hb)
		}
		if !sleep(ctx, n.interval()) {
			return
		}
	}
}

// assignment is what a report is fenced by: the lease's run and epoch, under one boot.
type assignment struct {
	runID string
	epoch int64
	boot  string
}

// work runs the steps of one heartbeat reply, then the ones each success unlocks.
func (n *Node) work(ctx context.Context, hb HeartbeatReply) {
	if hb.Lease == nil {
		return
	}
	a := assignment{runID: hb.Lease.RunID, epoch: hb.Lease.Epoch, boot: hb.Node.BootID}
	var todo []Step
	for _, s := range hb.Steps {
		if s.Runnable || s.Cancel {
			todo = append(todo, s)
		}
	}
	// Next may repeat a step already queued here from the heartbeat.
	seen := map[string]bool{}
	for len(todo) > 0 && ctx.Err() == nil {
		s := todo[0]
		todo = todo[1:]
		if seen[s.StepID] {
			continue
		}
		seen[s.StepID] = true
		next, ok := n.step(ctx, a, s)
		if !ok {
			return // refused, lost or cancelled: the next heartbeat says what is still ours
		}
		todo = append(todo, next...)
	}
}

// step runs one step: started, its duration, succeeded. It returns the steps the success
// unlocked, and false when the node must stop working on this run.
func (n *Node) step(ctx context.Context, a assignment, s Step) ([]Step, bool) {
	name := s.RunID + "/" + s.StepID
	if s.Cancel {
		n.cancelled(ctx, a, s)
		return nil, false
	}
	if _, err := n.report(ctx, a, s, "started"); err != nil {
		n.drop(ctx, name, err)
		return nil, false
	}
	d := duration(s.Spec)
	n.logf("%s started (epoch %d), running for %s", name, a.epoch, d)
	switch n.hold(ctx, a, s, d) {
	case cancelRequested:
		n.cancelled(ctx, a, s)
		return nil, false
	case lost:
		n.logf("%s: the lease of epoch %d is gone; dropping the work", name, a.epoch)
		return nil, false
	case stopped:
		return nil, false
	}
	rep, err := n.report(ctx, a, s, "succeeded")
	if err != nil {
		n.drop(ctx, name, err)
		return nil, false
	}
	n.logf("%s succeeded -> run %s", name, rep.RunState)
	return rep.Next, true
}

// holdResult is how a step's run time ended.
type holdResult int

const (
	done holdResult = iota
	cancelRequested
	lost
	stopped
)

// hold sleeps through a step's duration, heartbeating every Interval meanwhile: that renews
// the lease on long steps, and is how the node learns of a cancel, or that the lease it works
// under is gone (a restart, a forced cancel, an expiry).
func (n *Node) hold(ctx context.Context, a assignment, s Step, d time.Duration) holdResult {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return done
		}
		if !sleep(ctx, min(left, n.interval())) {
			return stopped
		}
		if time.Until(deadline) <= 0 {
			return done
		}
		hb, err := n.Heartbeat(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return stopped
			}
			continue // a missed heartbeat is not a lost lease; the report is fenced anyway
		}
		if r, over := standing(hb, a, s); over {
			return r
		}
	}
}

// standing reads a heartbeat taken during a step: whether the work must stop, and why.
func standing(hb HeartbeatReply, a assignment, s Step) (holdResult, bool) {
	if hb.Node.BootID != a.boot || hb.Lease == nil || hb.Lease.RunID != a.runID || hb.Lease.Epoch != a.epoch {
		return lost, true
	}
	for _, cur := range hb.Steps {
		if cur.StepID == s.StepID {
			if cur.Cancel {
				return cancelRequested, true
			}
			return done, false
		}
	}
	return lost, true
}

// cancelled acknowledges a cancel: the step stops at this safe point.
func (n *Node) cancelled(ctx context.Context, a assignment, s Step) {
	name := s.RunID + "/" + s.StepID
	rep, err := n.report(ctx, a, s, "cancelled")
	if err != nil {
		n.drop(ctx, name, err)
		return
	}
	n.logf("%s cancelled -> run %s", name, rep.RunState)
}

// drop logs why the node abandons a step. A 409 (stale_assignment, …) is Mediator saying the
// work is no longer this node's; anything else is abandoned the same way, since a simulated
// agent has no better recourse.
func (n *Node) drop(ctx context.Context, name string, err error) {
	if ctx.Err() != nil {
		return // shutting down, not dropping
	}
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusConflict {
		n.logf("%s: %d %s; dropping the work", name, se.Status, se.Code)
		return
	}
	n.logf("%s: %v; dropping the work", name, err)
}

// report sends one step report under the assignment's epoch and boot.
func (n *Node) report(ctx context.Context, a assignment, s Step, status string) (ReportReply, error) {
	body := map[string]any{"node_id": n.ID, "boot_id": a.boot, "epoch": a.epoch, "status": status}
	if status == "succeeded" {
		body["exit_code"] = 0
	}
	path := "/v1/runs/" + url.PathEscape(s.RunID) + "/steps/" + url.PathEscape(s.StepID) + "/result"
	var rep ReportReply
	_, err := n.call(ctx, http.MethodPost, path, body, &rep)
	return rep, err
}

// call sends a JSON request as this node and decodes a 2xx answer into out.
//
// Once ctx has ended no request starts, but one already in flight is finished rather than cut
// (bounded by requestTimeout): cutting it leaves the local gateway's handler with a cancelled
// context, which it logs as an error, and the node stops a few milliseconds later either way.
func (n *Node) call(ctx context.Context, method, path string, body, out any) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, n.Base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+n.Token)
	client := n.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(data, &p)
		return resp.StatusCode, &StatusError{Method: method, Path: path, Status: resp.StatusCode, Code: p.Code, Body: string(data)}
	}
	return resp.StatusCode, json.Unmarshal(data, out)
}

func (n *Node) interval() time.Duration {
	if n.Interval > 0 {
		return n.Interval
	}
	return DefaultInterval
}

func (n *Node) logf(format string, args ...any) {
	if n.Log != nil {
		n.Log(format, args...)
	}
}

// duration reads spec.duration ("1s"); a spec without one, or with a bad one, takes no time.
func duration(spec json.RawMessage) time.Duration {
	var s struct {
		Duration string `json:"duration"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return 0
	}
	d, err := time.ParseDuration(s.Duration)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// sleep waits d, or less if ctx ends first; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

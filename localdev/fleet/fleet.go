// Package fleet simulates node agents over Mediator's HTTP API, for the demo and tests. A
// Node heartbeats, runs the steps it is given by sleeping for their spec.duration (and fails
// those whose spec.exit_code is not 0), and reports them under its lease's epoch — the node's
// protocol (DESIGN.md) as a real agent speaks it, through the API client (shared/client), with
// no access to Mediator's internals.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// DefaultInterval is how often a Node heartbeats when Interval is zero: far faster than the
// next_heartbeat_seconds Mediator asks for, so a demo does not sit waiting.
const DefaultInterval = 200 * time.Millisecond

// requestTimeout bounds one call to Mediator, its retries included.
const requestTimeout = 10 * time.Second

// Node is one simulated agent. Set the exported fields, then call Run.
type Node struct {
	ID     string
	Labels []string
	// API is the client the node calls Mediator with; nil builds one from Base and Token.
	API   *client.Client
	Base  string // http://127.0.0.1:port
	Token string // "dev-node-"+ID under the local gateway's development tokens
	// Interval is the time between heartbeats, also while a step runs; 0 is DefaultInterval.
	Interval time.Duration
	// Log narrates what the node does; nil is quiet.
	Log func(format string, args ...any)

	mu   sync.Mutex
	boot string
	api  *client.Client
}

// Step is a step the node holds, with what it may do about it.
type Step = client.NodeStep

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
func (n *Node) Heartbeat(ctx context.Context) (*client.HeartbeatReply, error) {
	boot := n.BootID()
	if boot == "" {
		boot = n.Boot()
	}
	api, err := n.client()
	if err != nil {
		return nil, err
	}
	return call(ctx, func(ctx context.Context) (*client.HeartbeatReply, error) {
		return api.Heartbeat(ctx, n.ID, client.HeartbeatRequest{BootID: boot, Labels: n.Labels})
	})
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
func (n *Node) work(ctx context.Context, hb *client.HeartbeatReply) {
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

// step runs one step: started, its duration, then succeeded — or failed, with the spec's
// exit_code when that is not 0. It returns the steps the success unlocked, and false when the
// node must stop working on this run.
func (n *Node) step(ctx context.Context, a assignment, s Step) ([]Step, bool) {
	name := s.RunID + "/" + s.StepID
	if s.Cancel {
		n.cancelled(ctx, a, s)
		return nil, false
	}
	if _, err := n.report(ctx, a, s, wire.ReportStarted, 0); err != nil {
		n.drop(ctx, name, err)
		return nil, false
	}
	sp := readSpec(s.Spec)
	d := sp.duration()
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
	if sp.ExitCode != 0 {
		rep, err := n.report(ctx, a, s, wire.ReportFailed, sp.ExitCode)
		if err != nil {
			n.drop(ctx, name, err)
			return nil, false
		}
		n.logf("%s failed (exit %d) -> run %s", name, sp.ExitCode, rep.RunState)
		return rep.Next, true
	}
	rep, err := n.report(ctx, a, s, wire.ReportSucceeded, 0)
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
func standing(hb *client.HeartbeatReply, a assignment, s Step) (holdResult, bool) {
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
	rep, err := n.report(ctx, a, s, wire.ReportCancelled, 0)
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
	var refused *client.Error
	if errors.As(err, &refused) && refused.Status == http.StatusConflict {
		n.logf("%s: %d %s; dropping the work", name, refused.Status, refused.Code)
		return
	}
	n.logf("%s: %v; dropping the work", name, err)
}

// report sends one step report under the assignment's epoch and boot; a failure carries its
// exit code.
func (n *Node) report(ctx context.Context, a assignment, s Step, status string, exitCode int) (*client.ReportReply, error) {
	r := client.ReportRequest{NodeID: n.ID, BootID: a.boot, Epoch: a.epoch, Status: status}
	switch status {
	case wire.ReportSucceeded, wire.ReportFailed:
		r.ExitCode = &exitCode
	}
	api, err := n.client()
	if err != nil {
		return nil, err
	}
	return call(ctx, func(ctx context.Context) (*client.ReportReply, error) {
		return api.Report(ctx, s.RunID, s.StepID, r)
	})
}

// client is the node's API client: API, or one built once from Base and Token.
func (n *Node) client() (*client.Client, error) {
	if n.API != nil {
		return n.API, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.api == nil {
		api, err := client.New(n.Base, client.WithToken(n.Token), client.WithUserAgent("mediator-fleet/"+n.ID))
		if err != nil {
			return nil, err
		}
		n.api = api
	}
	return n.api, nil
}

// call makes one API call as this node.
//
// Once ctx has ended no call starts, but one already in flight is finished rather than cut
// (bounded by requestTimeout, its retries included): cutting it leaves the local gateway's
// handler with a cancelled context, which it logs as an error, and the node stops a few
// milliseconds later either way.
func call[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	return fn(ctx)
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

// spec is what the simulator reads of a step's spec: how long it runs ("1s"), and the exit
// code it ends with (0, the default, succeeds).
type spec struct {
	Duration string `json:"duration"`
	ExitCode int    `json:"exit_code"`
}

func readSpec(raw json.RawMessage) spec {
	var s spec
	if json.Unmarshal(raw, &s) != nil {
		return spec{}
	}
	return s
}

// duration is spec.duration; a spec without one, or with a bad one, takes no time.
func (s spec) duration() time.Duration {
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

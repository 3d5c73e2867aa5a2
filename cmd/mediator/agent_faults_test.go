//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mediator/cmd/mediator/agent"
	"mediator/shared/client"
)

// holdingProxy is a loopback HTTP proxy to the API that can hold one heartbeat's answer — the
// server has renewed the lease and written the answer; the agent has not heard it yet — for a
// while, as a slow network does, and cut the agent off from the moment that heartbeat passed.
type holdingProxy struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	hold  time.Duration // > 0: the next heartbeat's answer is held this long
	cut   bool
	held  chan struct{} // closed once the held answer was handed on
	armed bool
}

type heldKey struct{}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	up, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{t: t, held: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.ModifyResponse = func(resp *http.Response) error {
		if d, ok := resp.Request.Context().Value(heldKey{}).(time.Duration); ok {
			time.Sleep(d) // the fault itself: the answer in transit
		}
		return nil
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		cut, hold := p.cut, time.Duration(0)
		if p.armed && r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/nodes/") {
			hold, p.armed, p.cut = p.hold, false, true
		}
		p.mu.Unlock()
		if cut {
			panic(http.ErrAbortHandler) // the connection closes unanswered
		}
		if hold > 0 {
			r = r.WithContext(context.WithValue(r.Context(), heldKey{}, hold))
			defer close(p.held)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *holdingProxy) URL() string { return p.srv.URL }

// holdNextHeartbeat holds the next heartbeat's answer for d, then cuts everything after it.
func (p *holdingProxy) holdNextHeartbeat(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold, p.armed = d, true
}

func (p *holdingProxy) waitHeld() {
	p.t.Helper()
	select {
	case <-p.held:
	case <-time.After(patience):
		p.t.Fatal("no heartbeat passed the proxy")
	}
}

// The guard counts a lease from when the renewing request was sent, so time an answer spends
// in transit shortens what the agent believes it has: with one heartbeat's answer held for
// nearly as long as the agent waits for it and the API unreachable after it, every process of the
// step is dead while the lease is still live on the database's clock — for a short, a middling
// and the default TTL.
func TestAgentGuardIsNeverLate(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{9 * time.Second, 15 * time.Second, 60 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			env, base := serveAgents(t, ttl)
			px := newHoldingProxy(t, base)
			n := startAgent(t, px.URL(), "h-1", agentOpts{labels: []string{"kind=h"}})
			n.waitFor("heartbeating")
			pidsFifo := fifo(t, "pids")
			submit(t, base, client.RunRequest{RunID: "h", Needs: []string{"kind=h"}, Steps: []client.StepRequest{
				{ID: "s", Spec: spec("cmd", `sleep 1000 & echo $$ $! > "$PIDS"; wait`, "env", map[string]string{"PIDS": pidsFifo})}}})
			procs := pids(t, fromStep(t, pidsFifo))
			before := env.Count(`SELECT extract(epoch FROM expires_at)::int FROM leases WHERE node_id = 'h-1'`)

			// As long as the answer can be held and still be heard before the guard would fire
			// on the lease before it.
			px.holdNextHeartbeat(min(agent.HeartbeatTimeout(ttl/3), agent.RenewalRoom(ttl, ttl/3)) - 500*time.Millisecond)
			px.waitHeld()
			if env.Count(`SELECT count(*) FROM leases WHERE node_id = 'h-1' AND extract(epoch FROM expires_at)::int > $1`, before) != 1 {
				t.Fatal("the held heartbeat did not renew the lease: the test proves nothing")
			}
			n.waitFor("step killed by the lease guard", "run", "h")
			for _, pid := range procs {
				if !gone(pid) {
					t.Fatalf("%d lives on after the guard", pid)
				}
			}
			if env.Count(`SELECT count(*) FROM leases WHERE node_id = 'h-1' AND now() < expires_at`) != 1 {
				t.Fatal("the step's processes outlived the lease, on the database's clock")
			}
		})
	}
}

// delegatedCgroup is a cgroup of the test's own for an agent to start in, as systemd's
// Delegate=yes gives the agent's unit one; it is emptied and removed at the test's end.
func delegatedCgroup(t *testing.T) string {
	t.Helper()
	own, err := agent.OwnCgroup()
	if err != nil {
		t.Fatalf("this test needs cgroup v2 (mounted at /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host): %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(own, "mediator-test-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("this test needs a cgroup it may divide, as the agent's systemd unit gets one (Delegate=yes); run it as root or under `systemd-run --user -p Delegate=yes`: %v", err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		deadline := time.Now().Add(patience)
		for syscall.Rmdir(dir) == syscall.EBUSY && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // the kernel empties a killed cgroup on its own time
		}
	})
	return dir
}

// An agent killed with SIGKILL leaves a step that started a daemon in a session of its own
// (setsid) and a double-forked process. Under a delegated cgroup the next start kills both
// before its first heartbeat: a process cannot leave its cgroup. With process groups alone
// (--cgroups off) the double-forked process, still of the step's group, dies, and the daemon
// lives on — the limit the README states.
func TestAgentRestartKillsWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		cgroups    bool
		daemonDies bool
	}{
		{"cgroup", true, true},
		{"process groups", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, base := serveAgents(t, agentTTL)
			o := agentOpts{labels: []string{"kind=x"}, work: t.TempDir()}
			if tc.cgroups {
				o.cgroup = delegatedCgroup(t)
			} else {
				o.args = []string{"--cgroups", "off"}
			}
			first := startAgent(t, base, "x-1", o)
			first.waitFor("heartbeating")
			if tracked := first.index("steps are tracked by cgroup") >= 0; tracked != tc.cgroups {
				t.Fatalf("steps tracked by cgroup: %v, want %v", tracked, tc.cgroups)
			}
			daemonFifo, forkedFifo := fifo(t, "daemon"), fifo(t, "forked")
			cmd := `setsid sh -c 'echo $$ > "$DAEMON"; exec sleep 1011' & (sleep 1012 & echo $! > "$FORKED") & sleep 1013`
			submit(t, base, client.RunRequest{RunID: "x", Needs: []string{"kind=x"}, Steps: []client.StepRequest{
				{ID: "s", Spec: spec("cmd", cmd, "env", map[string]string{"DAEMON": daemonFifo, "FORKED": forkedFifo})}}})
			daemon, forked := pids(t, fromStep(t, daemonFifo))[0], pids(t, fromStep(t, forkedFifo))[0]
			if !tc.daemonDies {
				t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL); gone(daemon) })
			}
			first.signal(syscall.SIGKILL)
			first.wait()
			if gone(daemon) || gone(forked) {
				t.Fatal("the step's processes died with the agent; the test needs them left behind")
			}

			second := startAgent(t, base, "x-1", o)
			second.waitFor("killed a previous boot's step processes")
			second.waitFor("heartbeating")
			if k, h := second.index("killed a previous boot's step processes"), second.index("heartbeating"); k > h {
				t.Fatalf("the previous boot's processes were killed at record %d, after the first heartbeat at %d", k, h)
			}
			if !gone(forked) {
				t.Fatal("the double-forked process of the step's group outlived the restart")
			}
			if dead := gone(daemon); dead != tc.daemonDies {
				t.Fatalf("the setsid daemon gone after the restart: %v, want %v", dead, tc.daemonDies)
			}
		})
	}
}

// A step cannot wedge its agent through the files the agent reads after it: a FIFO, a link to
// a FIFO, or a device put in place of $MEDIATOR_OUTPUTS fails the step saying so, and names
// that would meet in one input variable fail the step that reads them before it starts. The
// agent then drains and exits 0 on the first SIGTERM.
func TestAgentCannotBeWedgedByAStep(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "w-1", agentOpts{labels: []string{"kind=w"}})
	n.waitFor("heartbeating")
	for _, tc := range []struct {
		run, cmd, says string
	}{
		{"fifo", `rm "$MEDIATOR_OUTPUTS" && mkfifo "$MEDIATOR_OUTPUTS"`, "MEDIATOR_OUTPUTS: a FIFO, not a regular file"},
		{"link", `mkfifo "$PWD/f" && ln -sf "$PWD/f" "$MEDIATOR_OUTPUTS"`, "MEDIATOR_OUTPUTS: a symbolic link, not a regular file"},
		{"device", `rm "$MEDIATOR_OUTPUTS" && mknod "$MEDIATOR_OUTPUTS" c 1 3`, "MEDIATOR_OUTPUTS: a character device, not a regular file"},
	} {
		submit(t, base, client.RunRequest{RunID: tc.run, Needs: []string{"kind=w"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", tc.cmd)}}})
		n.waitFor("step reported", "run", tc.run, "status", "failed")
		s := step(t, getRun(t, base, tc.run).Run, "s")
		if s.ExitCode == nil || *s.ExitCode != 0 || !strings.Contains(text(s.Message), tc.says) {
			t.Fatalf("%s: exit %v, message %q; want exit 0 and %q", tc.run, s.ExitCode, text(s.Message), tc.says)
		}
	}
	out := func(kv string) client.StepRequest {
		return client.StepRequest{Spec: spec("cmd", `echo `+kv+` >> "$MEDIATOR_OUTPUTS"`)}
	}
	x, xy := out("y_z=1"), out("z=2")
	x.ID, xy.ID = "x", "x-y"
	submit(t, base, client.RunRequest{RunID: "names", Needs: []string{"kind=w"}, Steps: []client.StepRequest{
		x, xy, {ID: "reader", After: []string{"x", "x-y"}, Spec: spec("cmd", "echo started")}}})
	n.waitFor("step reported", "run", "names", "step", "reader", "status", "failed")
	reader := step(t, getRun(t, base, "names").Run, "reader")
	if want := `MEDIATOR_INPUT_X_Y_Z would be both step "x"'s output "y_z" and step "x-y"'s output "z"`; !strings.Contains(text(reader.Message), want) ||
		reader.ExitCode != nil || strings.Contains(text(reader.Message), "started") {
		t.Fatalf("reader: exit %v, message %q; want no exit code and %q", reader.ExitCode, text(reader.Message), want)
	}

	n.signal(syscall.SIGTERM)
	if code := n.wait(); code != 0 {
		t.Fatalf("the agent exited %d after a drain", code)
	}
}

// A second signal exits within the cancel grace and a second, even when the step ignores
// SIGTERM and no report can reach the API; nothing of the step outlives the agent.
func TestAgentSecondSignalExitsWithinTheGrace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second // startAgent's --cancel-grace
	_, base := serveAgents(t, agentTTL)
	px := newProxy(t, base)
	n := startAgent(t, px.URL(), "q-1", agentOpts{labels: []string{"kind=q"}})
	n.waitFor("heartbeating")
	pidsFifo := fifo(t, "pids")
	submit(t, base, client.RunRequest{RunID: "q", Needs: []string{"kind=q"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `trap '' TERM; setsid sleep 1014 & a=$!; sleep 1015 & echo $$ $a $! > "$PIDS"; wait; wait`, "env", map[string]string{"PIDS": pidsFifo})}}})
	procs := pids(t, fromStep(t, pidsFifo))
	n.signal(syscall.SIGTERM)
	n.waitFor("drain in effect", "by", "agent")
	px.setCut(true)
	sent := time.Now()
	n.signal(syscall.SIGTERM)
	if code := n.wait(); code != 130 {
		t.Fatalf("exit %d, want 130", code)
	}
	// The promise, with a second of room for a loaded machine to start and reap processes.
	if took := time.Since(sent); took > grace+time.Second+time.Second {
		t.Fatalf("the agent took %s to exit after its second signal; the promise is the grace (%s) and a second", took, grace)
	}
	for _, pid := range procs {
		if !gone(pid) {
			t.Fatalf("%d outlived the agent", pid)
		}
	}
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mediator/cmd/mediator/agent"
	"mediator/localdev/agentlog"
	"mediator/localdev/apitest"
	"mediator/shared/client"
	"mediator/shared/config"
	"mediator/shared/wire"
)

// These tests run real `mediator agent` processes against the real handlers on PostgreSQL,
// and real steps. They wait on what the agents log and on what the steps write to FIFOs the
// test holds, never on the clock; a deadline only turns a hang into a failure. A failing test
// prints its agents' logs; AGENT_TEST_LOG=1 prints them always.

// patience bounds every wait: a failure detector, never a pace.
const patience = 90 * time.Second

// agentTTL is the lease's time to live of the agents' stacks: heartbeats every 3 s, the
// guard 2 s (and Date's second) before expiry, so a loaded machine does not trip it.
const agentTTL = 9 * time.Second

// serveAgents is a test's Mediator with a short lease.
func serveAgents(t *testing.T, ttl time.Duration) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.LeaseTTL = ttl }))
	return env, env.Serve()
}

var subreaper sync.Once

// adopt makes this test process the reaper of the orphans of its descendants: the steps an
// agent killed with SIGKILL leaves behind are then this process's to reap, and a test can see
// them gone (ESRCH) rather than lingering as zombies of an init that does not reap.
func adopt(t *testing.T) {
	subreaper.Do(func() {
		if err := agent.BecomeSubreaper(); err != nil {
			t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
		}
	})
}

// gone reports whether pid is no more: reaped if it was an orphan this process adopted, then
// ESRCH.
func gone(pid int) bool {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// agentProc is a `mediator agent` process and what it logs.
type agentProc struct {
	t      *testing.T
	node   string
	work   string
	cmd    *exec.Cmd
	log    *agentlog.Log
	exited chan struct{}
	code   int
}

type agentOpts struct {
	labels []string
	work   string // "" for a fresh one
	args   []string
	cgroup string // a cgroup to start the agent in, as systemd's Delegate=yes gives it one; "" for the test's own
}

// startAgent starts `mediator agent` as node against base, with the node's development token,
// logging JSON. The test's end kills it and whatever its steps left.
func startAgent(t *testing.T, base, node string, o agentOpts) *agentProc {
	t.Helper()
	adopt(t)
	if o.work == "" {
		o.work = t.TempDir()
	}
	// The host's free space is not what these tests are about: under the default 1 GiB a CI
	// box with a nearly full /tmp would quarantine every node. 1 MiB keeps the check (on the
	// disk test's small filesystem 5 % of it is the smaller limit, as by default).
	args := []string{"agent", "--node-id", node, "--work-dir", o.work, "--log-format", "json", "--cancel-grace", "2s", "--min-free", "1MiB"}
	for _, l := range o.labels {
		args = append(args, "--labels", l)
	}
	args = append(args, o.args...)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEDIATOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "MEDIATOR_URL="+base, "MEDIATOR_TOKEN=dev-node-"+node)
	if o.cgroup != "" {
		dir, err := os.Open(o.cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{t: t, node: node, work: o.work, cmd: cmd, log: agentlog.New(nil), exited: make(chan struct{})}
	go func() {
		p.log.Read(stderr)
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			p.code = exit.ExitCode()
		default:
			p.code = -1
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		// What its steps still run: the agent's own start-up reaping, as its next boot would.
		_, _, _ = agent.KillLeftovers(o.work, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if t.Failed() || os.Getenv("AGENT_TEST_LOG") != "" {
			t.Logf("agent %s logged:\n%s", node, p.log.Text())
		}
	})
	return p
}

// waitFor waits until the agent logs a record whose message begins with msg and whose
// attributes include attrs ("key", "value", ...), taking the records in order, and returns it.
func (p *agentProc) waitFor(msg string, attrs ...string) map[string]any {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	rec, err := p.log.Wait(ctx, msg, attrs...)
	if err != nil {
		p.t.Fatalf("agent %s: %v; it logged:\n%s", p.node, err, p.log.Text())
	}
	return rec
}

// record is the first record with msg, whatever was waited for before.
func (p *agentProc) record(msg string) map[string]any {
	p.t.Helper()
	i := p.index(msg)
	if i < 0 {
		p.t.Fatalf("agent %s never logged %q", p.node, msg)
	}
	return p.log.Record(i)
}

// index is the position of the first record with msg, or -1.
func (p *agentProc) index(msg string, attrs ...string) int { return p.log.Index(msg, attrs...) }

func (p *agentProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the agent to exit and returns its exit code.
func (p *agentProc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(patience):
		p.t.Fatalf("agent %s did not exit; it logged:\n%s", p.node, p.log.Text())
		return 0
	}
}

func (p *agentProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func logTime(t *testing.T, rec map[string]any) time.Time {
	t.Helper()
	s, _ := rec["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("the record's time %q: %v", s, err)
	}
	return at
}

// fifo is a named pipe a step and the test meet at: opening one end waits for the other.
func fifo(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fromStep reads what a step writes to a FIFO, once it has written and closed it.
func fromStep(t *testing.T, path string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(path)
		got <- string(b)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(patience):
		t.Fatalf("no step wrote to %s", path)
		return ""
	}
}

// toStep writes to a FIFO a step reads.
func toStep(t *testing.T, path, s string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(path, []byte(s), 0o600) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatalf("no step read %s", path)
	}
}

func pids(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(s) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("a pid: %q", s)
		}
		out = append(out, pid)
	}
	if len(out) == 0 {
		t.Fatalf("no pids in %q", s)
	}
	return out
}

func submit(t *testing.T, base string, run client.RunRequest) *client.Submitted {
	t.Helper()
	s, err := api(t, base, "dev-client").Submit(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func getRun(t *testing.T, base, runID string) *client.RunDetail {
	t.Helper()
	d, err := api(t, base, "dev-client").GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func step(t *testing.T, r client.Run, id string) client.Step {
	t.Helper()
	for _, s := range r.Steps {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("run %s has no step %s", r.RunID, id)
	return client.Step{}
}

func text(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func spec(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// A run of two roles on two agents: dut's step gives an output, host's step, after it on the
// other node, sees it as an input, and both nodes by role. Two steps of one role with no order
// between them run at once (each waits for the other at a FIFO). The run SUCCEEDED, and GET
// shows the output.
func TestAgentRunsTwoRolesThatTalk(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	dut := startAgent(t, base, "dut-1", agentOpts{labels: []string{"kind=dut,lab=2"}})
	host := startAgent(t, base, "host-1", agentOpts{labels: []string{"kind=host"}})
	dut.waitFor("heartbeating")
	host.waitFor("heartbeating")
	meet := fifo(t, "meet")
	run := client.RunRequest{
		RunID: "pair",
		Roles: map[string]client.RoleRequest{"dut": {Needs: []string{"kind=dut"}}, "host": {Needs: []string{"kind=host"}}},
		Steps: []client.StepRequest{
			{ID: "up", Role: "dut", Spec: spec("cmd", `echo booting; echo ip=10.0.0.7 >> "$MEDIATOR_OUTPUTS"; echo "model=rpi 4" >> "$MEDIATOR_OUTPUTS"`)},
			{ID: "ping", Role: "dut", Spec: spec("cmd", `echo ping > "$MEET"`, "env", map[string]string{"MEET": meet})},
			{ID: "pong", Role: "dut", Spec: spec("argv", []string{"sh", "-c", `read x < "$MEET"; echo "heard $x"`}, "env", map[string]string{"MEET": meet})},
			{ID: "check", Role: "host", After: []string{"up"}, Spec: spec(
				"argv", []string{"/bin/sh", "-c", strings.Join([]string{
					`test "$MEDIATOR_INPUT_UP_IP" = 10.0.0.7`,
					`test "$MEDIATOR_INPUT_UP_MODEL" = "rpi 4"`,
					`grep -q '"ip":"10.0.0.7"' "$MEDIATOR_INPUTS"`,
					`test "$MEDIATOR_NODE_DUT" = dut-1`, `test "$MEDIATOR_NODE_HOST" = host-1`,
					`test "$MEDIATOR_ROLE" = host`, `test "$MEDIATOR_NODE_ID" = host-1`, `test "$MEDIATOR_RUN_ID" = pair`,
					`test "$MEDIATOR_STEP_ID" = check`, `test "$MEDIATOR_ATTEMPT" = 1`,
					`test -z "$MEDIATOR_TOKEN"`, `test "$GREETING" = hello`,
					`echo checked in "$(pwd)"`,
				}, " && ")},
				"env", map[string]string{"GREETING": "hello"})},
		},
	}
	runFile := file(t, "run.json", string(must(json.Marshal(run))))
	expect(t, mediator(t, base, "", "submit", "-f", runFile, "--wait"), 0, "run pair: SUCCEEDED")

	r := getRun(t, base, "pair").Run
	up := step(t, r, "up")
	if !maps.Equal(up.Outputs, map[string]string{"ip": "10.0.0.7", "model": "rpi 4"}) {
		t.Fatalf("up's outputs: %v", up.Outputs)
	}
	if !strings.Contains(text(up.Message), "booting") {
		t.Fatalf("up's message: %q", text(up.Message))
	}
	check := step(t, r, "check")
	if !strings.Contains(text(check.Message), "checked in "+host.work+"/steps/pair+check+1/work") {
		t.Fatalf("check's message: %q", text(check.Message))
	}
	if pong := step(t, r, "pong"); !strings.Contains(text(pong.Message), "heard ping") {
		t.Fatalf("pong's message: %q", text(pong.Message))
	}
	// The whole output stays on the node, one file per run, step and attempt; the step's own
	// directory does not.
	if out := readFile(t, filepath.Join(host.work, "output", "pair+check+1.log")); !strings.Contains(out, "checked in") {
		t.Fatalf("host's output file: %q", out)
	}
	if entries, _ := os.ReadDir(filepath.Join(host.work, "steps")); len(entries) != 0 {
		t.Fatalf("steps' directories left: %v", entries)
	}
}

// A cancel stops the step's whole process group — a grandchild included — with SIGTERM, or
// with SIGKILL once the grace is over for what ignores SIGTERM; then the run is CANCELLED, by
// the agent's report.
func TestAgentCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cmd string
		killed    bool // only SIGKILL stops it
	}{
		{"sigterm", `sleep 1000 & echo $$ $! > "$PIDS"; wait`, false},
		{"sigkill", `trap '' TERM; sleep 1000 & echo $$ $! > "$PIDS"; wait; wait`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, base := serveAgents(t, agentTTL)
			n := startAgent(t, base, "c-1", agentOpts{labels: []string{"kind=c"}})
			n.waitFor("heartbeating")
			fifoPath := fifo(t, "pids")
			submit(t, base, client.RunRequest{RunID: "c", Needs: []string{"kind=c"}, Steps: []client.StepRequest{
				{ID: "s", Spec: spec("cmd", tc.cmd, "env", map[string]string{"PIDS": fifoPath})}}})
			procs := pids(t, fromStep(t, fifoPath))
			for _, pid := range procs {
				if gone(pid) {
					t.Fatalf("%d is gone before the cancel", pid)
				}
			}
			c, err := api(t, base, "dev-client").Cancel(context.Background(), "c", client.CancelRequest{Reason: "enough"})
			if err != nil || c.Settled() {
				t.Fatalf("cancel: %v (settled %v): the step runs, so the run waits for its node", err, c != nil && c.Settled())
			}
			n.waitFor("step reported", "run", "c", "status", "cancelled")
			for _, pid := range procs {
				if !gone(pid) {
					t.Fatalf("%d of the step's group lives on after the cancel", pid)
				}
			}
			if killed := n.index("the grace is over: SIGKILL") >= 0; killed != tc.killed {
				t.Fatalf("SIGKILL after the grace: %v, want %v", killed, tc.killed)
			}
			r := getRun(t, base, "c").Run
			if r.State != wire.Cancelled || step(t, r, "s").State != wire.Cancelled {
				t.Fatalf("run %s, step %s", r.State, step(t, r, "s").State)
			}
		})
	}
}

// What the agent cannot run, or what goes wrong, fails the step with a message saying why: a
// step past its timeout_seconds is killed; a spec the agent does not understand is refused; a
// bad line in MEDIATOR_OUTPUTS fails a step that exited 0.
func TestAgentFailsStepsSayingWhy(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "f-1", agentOpts{labels: []string{"kind=f"}})
	n.waitFor("heartbeating")
	for _, tc := range []struct {
		run  string
		spec map[string]any
		code int // -1: none
		says []string
	}{
		{"slow", spec("cmd", "echo started; exec sleep 1000", "timeout_seconds", 1), 143,
			[]string{"timed out after 1s (timeout_seconds)", "started"}},
		{"odd", spec("cmd", "true", "duration", "1s"), -1, []string{`the agent cannot run this spec: unknown field "duration"`}},
		{"nothing", spec("argv", []string{"no-such-program"}), -1, []string{`"no-such-program": not found in the step's PATH`}},
		{"badout", spec("cmd", `echo "not a pair" >> "$MEDIATOR_OUTPUTS"`), 0, []string{"MEDIATOR_OUTPUTS: line 1: not key=value"}},
		{"exit3", spec("cmd", "echo to stderr >&2; exit 3"), 3, []string{"to stderr"}},
	} {
		submit(t, base, client.RunRequest{RunID: tc.run, Needs: []string{"kind=f"}, Steps: []client.StepRequest{{ID: "s", Spec: tc.spec}}})
		n.waitFor("step reported", "run", tc.run, "status", "failed")
		r := getRun(t, base, tc.run).Run
		s := step(t, r, "s")
		if r.State != wire.Failed || s.State != wire.Failed {
			t.Fatalf("%s: run %s, step %s", tc.run, r.State, s.State)
		}
		if (tc.code < 0) != (s.ExitCode == nil) || (s.ExitCode != nil && *s.ExitCode != tc.code) {
			t.Fatalf("%s: exit code %v, want %d", tc.run, s.ExitCode, tc.code)
		}
		for _, want := range tc.says {
			if !strings.Contains(text(s.Message), want) {
				t.Fatalf("%s: the message %q does not say %q", tc.run, text(s.Message), want)
			}
		}
	}
}

// proxy is a loopback TCP proxy to the API that the test can cut: every connection through it
// closed, and every new one closed as soon as it is accepted.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// An agent cut off from the API while another node keeps heartbeating (no outage grace):
// before its lease expires, as the API recorded it, the agent has killed the step's processes
// and dropped the work. The reaper then fails the run, and the queued run that waited for the
// node runs once the agent is back — after the first run's processes are gone, as that run's
// own step checks.
func TestAgentDropsTheWorkBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel()
	env, base := serveAgents(t, agentTTL)
	px := newProxy(t, base)
	cut := startAgent(t, px.URL(), "cut-1", agentOpts{labels: []string{"kind=cut"}})
	other := startAgent(t, base, "other-1", agentOpts{labels: []string{"kind=other"}})
	cut.waitFor("heartbeating")
	other.waitFor("heartbeating")

	fifoPath := fifo(t, "pids")
	submit(t, base, client.RunRequest{RunID: "first", Needs: []string{"kind=cut"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `sleep 1000 & echo $$ $! > "$PIDS"; wait`, "env", map[string]string{"PIDS": fifoPath})}}})
	procs := pids(t, fromStep(t, fifoPath))
	var list []string
	for _, pid := range procs {
		list = append(list, strconv.Itoa(pid))
	}
	check := `for p in $FIRST; do if kill -0 "$p" 2>/dev/null; then echo "run first's $p lives"; exit 1; fi; done; echo "first is gone"`
	if s := submit(t, base, client.RunRequest{RunID: "second", Needs: []string{"kind=cut"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", check, "env", map[string]string{"FIRST": strings.Join(list, " ")})}}}); !s.Queued() {
		t.Fatalf("second: %d, want 202 queued behind first", s.Status)
	}

	px.setCut(true)
	dropped := cut.waitFor("step killed by the lease guard", "run", "first")
	for _, pid := range procs {
		if !gone(pid) {
			t.Fatalf("%d lives on after the agent dropped the work", pid)
		}
	}
	leases, err := api(t, base, "dev-admin").ListLeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var lease *client.Lease
	for i := range leases.Leases {
		if leases.Leases[i].NodeID == "cut-1" {
			lease = &leases.Leases[i]
		}
	}
	if lease == nil || lease.RunID != "first" {
		t.Fatalf("the lease of cut-1 is gone already: %+v", leases.Leases)
	}
	if at := logTime(t, dropped); !at.Before(lease.ExpiresAt) {
		t.Fatalf("the work was dropped at %s, not before the lease's expires_at %s", at, lease.ExpiresAt)
	}

	// The reaper sees the lease expire when it does: this polls it, the deadline a failure
	// detector.
	deadline := time.Now().Add(patience)
	for env.State("first") == wire.Running {
		if time.Now().After(deadline) {
			t.Fatal("the reaper never released the lease of first")
		}
		env.Reap()
		time.Sleep(100 * time.Millisecond)
	}
	if r := getRun(t, base, "first").Run; r.State != wire.Failed || r.ReasonText() != "lease_expired" {
		t.Fatalf("first: %s %s", r.State, r.ReasonText())
	}

	px.setCut(false)
	cut.waitFor("step reported", "run", "second", "status", "succeeded")
	r := getRun(t, base, "second").Run
	if r.State != wire.Succeeded || !strings.Contains(text(step(t, r, "s").Message), "first is gone") {
		t.Fatalf("second: %s %q", r.State, text(step(t, r, "s").Message))
	}
}

// Cut off, the agent drops the work at its guard; back before anyone reaped the lease, it
// finds the same lease again (as after an outage grace): the killed try is reported failed,
// lease_lost, rather than left RUNNING, and the work goes on under the lease — here the
// step's retry, when it has one.
func TestAgentReportsWhatItDroppedWhenTheLeaseComesBack(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, 1} {
		t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			_, base := serveAgents(t, agentTTL)
			px := newProxy(t, base)
			n := startAgent(t, px.URL(), "g-1", agentOpts{labels: []string{"kind=g"}})
			n.waitFor("heartbeating")
			fifoPath, mark := fifo(t, "pids"), filepath.Join(t.TempDir(), "mark")
			cmd := `if [ -e "$MARK" ]; then echo "second try"; exit 0; fi; touch "$MARK"; sleep 1000 & echo $$ $! > "$PIDS"; wait`
			submit(t, base, client.RunRequest{RunID: "g", Needs: []string{"kind=g"}, Steps: []client.StepRequest{
				{ID: "s", Retries: retries, Spec: spec("cmd", cmd, "env", map[string]string{"PIDS": fifoPath, "MARK": mark})}}})
			procs := pids(t, fromStep(t, fifoPath))
			px.setCut(true)
			n.waitFor("step killed by the lease guard", "run", "g")
			for _, pid := range procs {
				if !gone(pid) {
					t.Fatalf("%d lives on after the guard", pid)
				}
			}
			px.setCut(false)
			if retries == 0 {
				n.waitFor("step reported", "run", "g", "status", "failed")
				r := getRun(t, base, "g").Run
				if s := step(t, r, "s"); r.State != wire.Failed || s.State != wire.Failed || text(s.Message) != "lease_lost" || s.ExitCode == nil || *s.ExitCode != 137 {
					t.Fatalf("g: %s, the step %s %q exit %v", r.State, s.State, text(s.Message), s.ExitCode)
				}
				return
			}
			n.waitFor("step reported", "run", "g", "status", "succeeded")
			// The report and the renewal race each other once the API answers: either may
			// come first, and the retry starts only once both have.
			if n.index("step reported", "run", "g", "status", "failed", "step_state", "PENDING") < 0 || n.index("the lease is renewed again", "run", "g") < 0 {
				t.Fatal("the dropped try was not reported failed, or the lease did not come back")
			}
			if n.index("lease taken") != n.index("lease taken", "run", "g", "epoch", "1") || strings.Count(n.log.Text(), `"lease taken"`) != 1 {
				t.Fatal("the lease came back as another")
			}
			r := getRun(t, base, "g").Run
			if s := step(t, r, "s"); r.State != wire.Succeeded || s.Tries != 2 || !strings.Contains(text(s.Message), "second try") {
				t.Fatalf("g: %s, step tried %d: %q", r.State, s.Tries, text(s.Message))
			}
		})
	}
}

// A lease gone — here by an admin's forced cancel, which the next heartbeat shows — kills the
// work at once: no grace, no report.
func TestAgentKillsTheWorkOfALeaseGone(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "k-1", agentOpts{labels: []string{"kind=k"}})
	n.waitFor("heartbeating")
	fifoPath := fifo(t, "pids")
	submit(t, base, client.RunRequest{RunID: "k", Needs: []string{"kind=k"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `trap '' TERM; sleep 1000 & echo $$ $! > "$PIDS"; wait; wait`, "env", map[string]string{"PIDS": fifoPath})}}})
	procs := pids(t, fromStep(t, fifoPath))
	cmd, stdout, stderr := command(base, "", "cancel", "k", "--force")
	cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-admin")
	expect(t, ended(t, cmd.Run(), stdout, stderr), 0, "CANCELLED")
	n.waitFor("the lease is gone: killing its work at once", "run", "k")
	n.waitFor("step killed: the lease is gone", "run", "k")
	for _, pid := range procs {
		if !gone(pid) {
			t.Fatalf("%d lives on", pid)
		}
	}
	if n.index("the grace is over") >= 0 || n.index("step reported", "run", "k") >= 0 {
		t.Fatal("a lease gone is killed at once and not reported")
	}
}

// What a step leaves running in its process group ends with the step; what left the group
// (setsid, a daemon) is the agent's orphan, and ends with the lease, before another starts.
func TestAgentLeavesNothingOfAStepBehind(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "o-1", agentOpts{labels: []string{"kind=o"}})
	n.waitFor("heartbeating")
	inGroup, outside, ready := fifo(t, "in-group"), fifo(t, "outside"), fifo(t, "ready")
	// The step ends only once its second process has left the group (setsid) and said so.
	cmd := `sleep 1000 & echo $! > "$IN_GROUP"; setsid sh -c 'echo $$ > "$OUTSIDE"; echo > "$READY"; exec sleep 1000' & read x < "$READY"`
	submit(t, base, client.RunRequest{RunID: "o", Needs: []string{"kind=o"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", cmd, "env", map[string]string{"IN_GROUP": inGroup, "OUTSIDE": outside, "READY": ready})}}})
	procs := append(pids(t, fromStep(t, inGroup)), pids(t, fromStep(t, outside))...)
	n.waitFor("step reported", "run", "o", "status", "succeeded")
	if !gone(procs[0]) {
		t.Fatalf("%d, left in the step's group, outlived the step", procs[0])
	}
	n.waitFor("killed what steps left running outside their process groups", "when", "the lease ended")
	if !gone(procs[1]) {
		t.Fatalf("%d, left in a session of its own, outlived the lease", procs[1])
	}
}

// A report that frees the node is answered with the queued run placed on it, which the agent
// starts without waiting for its next heartbeat.
func TestAgentTakesTheNextRunFromAReportsAnswer(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "n-1", agentOpts{labels: []string{"kind=n"}})
	n.waitFor("heartbeating")
	goPath := fifo(t, "go")
	submit(t, base, client.RunRequest{RunID: "one", Needs: []string{"kind=n"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `read x < "$GO"`, "env", map[string]string{"GO": goPath})}}})
	n.waitFor("step started", "run", "one")
	if s := submit(t, base, client.RunRequest{RunID: "two", Needs: []string{"kind=n"}, Steps: []client.StepRequest{
		{ID: "a", Spec: spec("cmd", "echo a")}, {ID: "b", After: []string{"a"}, Spec: spec("cmd", "echo b")}}}); !s.Queued() {
		t.Fatalf("two: %d, want 202", s.Status)
	}
	toStep(t, goPath, "go\n")
	n.waitFor("lease taken", "run", "two", "via", "report")
	n.waitFor("step reported", "run", "two", "step", "b", "status", "succeeded")
}

// An agent killed with SIGKILL leaves its step running; started again, before it heartbeats,
// it kills what the previous boot recorded, and its first heartbeat, under a new boot id,
// releases the lease at once (node_restarted). The run's next attempt runs on it.
func TestAgentRestartKillsThePreviousBootsSteps(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	work := t.TempDir()
	first := startAgent(t, base, "r-1", agentOpts{labels: []string{"kind=r"}, work: work})
	first.waitFor("heartbeating")
	fifoPath := fifo(t, "pids")
	cmd := `if [ "$MEDIATOR_ATTEMPT" = 1 ]; then sleep 1000 & echo $$ $! > "$PIDS"; wait; fi; echo "attempt $MEDIATOR_ATTEMPT"`
	submit(t, base, client.RunRequest{RunID: "rs", Needs: []string{"kind=r"}, MaxAttempts: 2, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", cmd, "env", map[string]string{"PIDS": fifoPath})}}})
	procs := pids(t, fromStep(t, fifoPath))
	boot1 := first.record("agent starting")["boot"]

	first.signal(syscall.SIGKILL)
	first.wait()
	for _, pid := range procs {
		if gone(pid) {
			t.Fatalf("%d died with the agent; the test needs it left behind", pid)
		}
	}

	second := startAgent(t, base, "r-1", agentOpts{labels: []string{"kind=r"}, work: work})
	if boot2 := second.waitFor("agent starting")["boot"]; boot2 == boot1 || boot1 == nil {
		t.Fatalf("the same boot id %v after a restart", boot2)
	}
	second.waitFor("killed what a previous boot left running")
	for _, pid := range procs {
		if !gone(pid) {
			t.Fatalf("%d of the previous boot lives on", pid)
		}
	}
	second.waitFor("step reported", "run", "rs", "status", "succeeded")
	if k, l := second.index("killed what a previous boot left running"), second.index("heartbeating"); k < 0 || l < k {
		t.Fatalf("the previous boot's steps were killed at record %d, the first heartbeat answered at %d", k, l)
	}
	d := getRun(t, base, "rs")
	if d.Run.State != wire.Succeeded || d.Run.Attempt != 2 || !strings.Contains(text(step(t, d.Run, "s").Message), "attempt 2") {
		t.Fatalf("rs: %s attempt %d", d.Run.State, d.Run.Attempt)
	}
	if !slices.ContainsFunc(d.History, func(e client.Event) bool { return e.Reason != nil && *e.Reason == "node_restarted" }) {
		t.Fatalf("no node_restarted in the history: %+v", d.History)
	}
}

// The first SIGTERM drains: the agent says so in its heartbeat, so nothing new is placed on
// it; it finishes the step it runs, reports it, and exits 0.
func TestAgentDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "d-1", agentOpts{labels: []string{"kind=d"}})
	n.waitFor("heartbeating")
	goPath := fifo(t, "go")
	submit(t, base, client.RunRequest{RunID: "busy", Needs: []string{"kind=d"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `read word < "$GO"; echo "told $word"`, "env", map[string]string{"GO": goPath})}}})
	n.waitFor("step started", "run", "busy")

	n.signal(syscall.SIGTERM)
	n.waitFor("draining")
	n.waitFor("drain in effect", "by", "agent")
	if s := submit(t, base, client.RunRequest{RunID: "later", Needs: []string{"kind=d"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "true")}}}); !s.Queued() {
		t.Fatalf("later: %d, want 202", s.Status)
	}
	toStep(t, goPath, "finish\n")
	if code := n.wait(); code != 0 {
		t.Fatalf("the drained agent exited %d", code)
	}
	if r := getRun(t, base, "busy").Run; r.State != wire.Succeeded || !strings.Contains(text(step(t, r, "s").Message), "told finish") {
		t.Fatalf("busy: %s", r.State)
	}
	if r := getRun(t, base, "later").Run; r.State != wire.Queued {
		t.Fatalf("later: %s, want QUEUED: nothing new goes to a draining node", r.State)
	}
	if n.index("lease taken", "run", "later") >= 0 {
		t.Fatal("the draining agent took later")
	}
}

// A second SIGTERM cancels the steps the drain waits for: SIGTERM to their groups, reported
// cancelled, and the agent exits 130.
func TestAgentSecondSignalCancelsTheSteps(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "s-1", agentOpts{labels: []string{"kind=s"}})
	n.waitFor("heartbeating")
	fifoPath := fifo(t, "pids")
	submit(t, base, client.RunRequest{RunID: "long", Needs: []string{"kind=s"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `sleep 1000 & echo $$ $! > "$PIDS"; wait`, "env", map[string]string{"PIDS": fifoPath})}}})
	procs := pids(t, fromStep(t, fifoPath))
	n.signal(syscall.SIGTERM)
	n.waitFor("drain in effect", "by", "agent")
	n.signal(syscall.SIGTERM)
	if code := n.wait(); code != 130 {
		t.Fatalf("exit %d, want 130", code)
	}
	for _, pid := range procs {
		if !gone(pid) {
			t.Fatalf("%d outlived the agent", pid)
		}
	}
	s := step(t, getRun(t, base, "long").Run, "s")
	if s.State != wire.Cancelled || !strings.Contains(text(s.Message), "the agent on node s-1 was stopped") {
		t.Fatalf("the step: %s %q", s.State, text(s.Message))
	}
}

// An admin's drain (mediator drain) stops new work without stopping the agent; mediator
// undrain lifts it, and the agent takes work again.
func TestAgentHonoursAnAdminsDrain(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "a-1", agentOpts{labels: []string{"kind=a"}})
	n.waitFor("heartbeating")
	admin := func(args ...string) result {
		cmd, stdout, stderr := command(base, "", args...)
		cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-admin")
		return ended(t, cmd.Run(), stdout, stderr)
	}
	expect(t, mediator(t, base, "", "drain", "a-1"), 3, "403")
	expect(t, admin("drain", "a-1"), 0, "node a-1", "drained by")
	expect(t, admin("drain", "nope"), 3, "404")
	n.waitFor("drain in effect")
	if s := submit(t, base, client.RunRequest{RunID: "held", Needs: []string{"kind=a"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}}); !s.Queued() {
		t.Fatalf("held: %d, want 202 while the node is drained", s.Status)
	}
	expect(t, admin("undrain", "a-1"), 0, "node a-1", "not draining")
	n.waitFor("drain lifted")
	n.waitFor("step reported", "run", "held", "status", "succeeded")
	if !n.running() {
		t.Fatal("the agent exited on an admin's drain")
	}
	if r := getRun(t, base, "held").Run; r.State != wire.Succeeded {
		t.Fatalf("held: %s", r.State)
	}
}

// SIGHUP reads the labels file again and advertises it at once.
func TestAgentReloadsItsLabelsOnSIGHUP(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	labels := file(t, "labels", "# the board\nkind=old\n")
	n := startAgent(t, base, "l-1", agentOpts{args: []string{"--labels-file", labels}, labels: []string{"site=lab"}})
	n.waitFor("heartbeating")
	if err := os.WriteFile(labels, []byte("kind=new # rewired\nusb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGHUP)
	n.waitFor("labels reloaded", "labels", "[kind=new site=lab usb]")
	submit(t, base, client.RunRequest{RunID: "new", Needs: []string{"kind=new", "usb"}, WaitForCapacity: true,
		Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "true")}}})
	n.waitFor("step reported", "run", "new", "status", "succeeded")
	if err := os.WriteFile(labels, []byte("not a label!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGHUP)
	n.waitFor("SIGHUP: the labels file is not usable")
}

// What stops an agent from starting exits 3, saying why: a second agent on a work dir in use
// (it would take the first one's steps for a previous boot's), bad flags, a bad labels file,
// a heartbeat the API refuses.
func TestAgentRefusesToStartWrong(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	work := t.TempDir()
	first := startAgent(t, base, "w-1", agentOpts{work: work})
	first.waitFor("heartbeating")
	second := startAgent(t, base, "w-2", agentOpts{work: work})
	second.waitFor("the work dir", "error", "another agent is using "+work+" (resource temporarily unavailable)")
	if code := second.wait(); code != 3 {
		t.Fatalf("a second agent on %s exited %d", work, code)
	}
	cmd, stdout, stderr := command(base, "", "agent", "--node-id", "w-4", "--work-dir", t.TempDir())
	cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-node-w-5") // another node's credentials
	expect(t, ended(t, cmd.Run(), stdout, stderr), 3, "the API refuses this node's heartbeat", "403")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--node-id", "no spaces"}, "--node-id"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--cancel-grace", "0s"}, "--cancel-grace"},
		{[]string{"--labels", "not a label"}, "is not a label"},
		{[]string{"--labels-file", filepath.Join(t.TempDir(), "none")}, "no such file"},
	} {
		args := append([]string{"agent", "--work-dir", t.TempDir(), "--node-id", "w-6"}, tc.args...)
		cmd, stdout, stderr := command(base, "", args...)
		cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-node-w-6")
		expect(t, ended(t, cmd.Run(), stdout, stderr), 3, tc.says)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// buildMediator builds the mediator binary into dir, with the go tool of the toolchain this
// program was built by, so the agents are the code of this very tree.
func buildMediator(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "mediator")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	// By import path, so it builds from any directory of the module (the test runs in its own).
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "mediator/cmd/mediator").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building mediator: %w\n%s", err, out)
	}
	return bin, nil
}

// printer serializes the demo's numbered lines and the agents' narration onto one writer.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) println(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, s)
}

// agentProc is one `mediator agent` process: one boot of a node. What it logs (JSON, one
// record a line) is kept to be waited on, and narrated in short human form as it comes.
type agentProc struct {
	node, work string
	cmd        *exec.Cmd
	say        func(string)

	mu      sync.Mutex
	records []map[string]any
	cursor  int  // the records waitFor has consumed
	closed  bool // its output ended
	quiet   bool // being stopped: nothing more is narrated
	changed chan struct{}

	exited chan struct{}
	code   int // once exited: the exit code, -1 when a signal ended it
	how    string
}

// startAgent starts `mediator agent` as node against base, in a process group of its own: a
// Ctrl-C at the terminal reaches the demo alone, which then stops its agents itself.
func startAgent(bin, base, node, work string, labels []string, say func(string)) (*agentProc, error) {
	args := []string{"agent", "--node-id", node, "--work-dir", work, "--url", base, "--token", "dev-node-" + node,
		"--log-format", "json"}
	for _, l := range labels {
		args = append(args, "--labels", l)
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEDIATOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = agentProcAttr()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("starting the agent of %s: %w", node, err)
	}
	a := &agentProc{node: node, work: work, cmd: cmd, say: say, changed: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		a.consume(r)
		r.Close()
		err := cmd.Wait()
		a.code, a.how = 0, "exited 0"
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			a.code, a.how = exit.ExitCode(), exit.String()
		case err != nil:
			a.code, a.how = -1, err.Error()
		}
		a.mu.Lock()
		quiet := a.quiet
		a.mu.Unlock()
		if !quiet && a.code < 0 {
			a.say(fmt.Sprintf("%s: the agent process ended (%s)", node, a.how))
		}
		close(a.exited)
	}()
	return a, nil
}

// consume reads the agent's log to its end, narrating each record before it can be waited
// on, so the lines a wait was for are printed above what the demo says next.
func (a *agentProc) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			rec = map[string]any{"msg": sc.Text(), "raw": true}
		}
		a.mu.Lock()
		quiet := a.quiet
		a.mu.Unlock()
		if s := narrate(rec); s != "" && !quiet {
			a.say(a.node + ": " + s)
		}
		a.mu.Lock()
		a.records = append(a.records, rec)
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.closed = true
	close(a.changed)
	a.mu.Unlock()
}

// narrate is a record in short human form, "" for what the demo leaves out.
func narrate(rec map[string]any) string {
	msg, _ := rec["msg"].(string)
	attr := func(k string) string {
		if v, ok := rec[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	runStep := attr("run") + "/" + attr("step")
	switch {
	case rec["raw"] != nil:
		return msg
	case msg == "agent starting":
		return "agent starting, boot " + attr("boot")
	case msg == "killed what a previous boot left running":
		n := attr("processes")
		if n != "1" {
			n += " processes"
		} else {
			n += " process"
		}
		return "before its first heartbeat, killed what the previous boot's steps left running (" + n + ")"
	case msg == "heartbeating":
		return "heartbeating every " + attr("every")
	case msg == "lease taken":
		return fmt.Sprintf("leased to run %s (epoch %s)", attr("run"), attr("epoch"))
	case msg == "step started":
		return "started " + runStep
	case msg == "step reported":
		return fmt.Sprintf("%s %s, run %s %s", runStep, attr("status"), attr("run"), attr("run_state"))
	case strings.HasPrefix(msg, "drain in effect"):
		if by := attr("by"); by != "agent" {
			return "drained by " + by + ": takes no new work, keeps running"
		}
		return "the API has it draining: takes no new work"
	case strings.HasPrefix(msg, "drain lifted"):
		return "drain lifted: takes work again"
	case strings.HasPrefix(msg, "draining:"):
		return "signal " + attr("signal") + ": draining (finishes the lease it holds, then exits)"
	case msg == "agent exiting":
		return "agent exiting with code " + attr("code")
	case attr("level") == "WARN" || attr("level") == "ERROR":
		s := strings.ToLower(attr("level")) + ": " + msg
		if e := attr("error"); e != "" {
			s += " (" + e + ")"
		}
		return s
	}
	return ""
}

// waitFor consumes the agent's records in order until one whose message begins with msg and
// whose attributes include attrs ("key", "value", ...), and returns it. ctx's deadline only
// turns an agent that never gets there into a failure instead of a hang.
func (a *agentProc) waitFor(ctx context.Context, msg string, attrs ...string) (map[string]any, error) {
	for {
		a.mu.Lock()
		for a.cursor < len(a.records) {
			rec := a.records[a.cursor]
			a.cursor++
			if matches(rec, msg, attrs) {
				a.mu.Unlock()
				return rec, nil
			}
		}
		changed, closed := a.changed, a.closed
		a.mu.Unlock()
		want := strings.TrimSpace(fmt.Sprintf("%q %s", msg, strings.Join(attrs, "=")))
		if closed {
			<-a.exited
			return nil, fmt.Errorf("expected %s's agent to log %s, but it %s first", a.node, want, a.how)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("expected %s's agent to log %s, but it had not when the wait ended: %w", a.node, want, ctx.Err())
		}
	}
}

func matches(rec map[string]any, msg string, attrs []string) bool {
	m, _ := rec["msg"].(string)
	if !strings.HasPrefix(m, msg) {
		return false
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		if fmt.Sprint(rec[attrs[i]]) != attrs[i+1] {
			return false
		}
	}
	return true
}

// boot is the agent's boot id, once it said it.
func (a *agentProc) boot() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rec := range a.records {
		if b, ok := rec["boot"].(string); ok {
			return b
		}
	}
	return "?"
}

// wait waits for the process to end and returns its exit code (-1: a signal ended it).
func (a *agentProc) wait(ctx context.Context) (int, error) {
	select {
	case <-a.exited:
		return a.code, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("expected %s's agent to exit, but it was still running when the wait ended: %w", a.node, ctx.Err())
	}
}

func (a *agentProc) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// kill ends the agent with SIGKILL to its process group, as a crash would, and waits for it.
// Its steps run in process groups of their own and live on.
func (a *agentProc) kill() {
	if a.running() {
		_ = killGroup(a.cmd.Process.Pid)
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second): // a process SIGKILL does not end is not the demo's to wait for
	}
}

// stop ends the agent and whatever its steps still run, silently: the demo is ending, or
// failed, or was interrupted. The steps are found as the agent's next boot would find them,
// from the process groups it recorded under its work dir.
func (a *agentProc) stop() {
	a.mu.Lock()
	a.quiet = true
	a.mu.Unlock()
	a.kill()
	killLeftovers(a.work)
}

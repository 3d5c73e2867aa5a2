package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"mediator/localdev/agentlog"
)

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
	log        *agentlog.Log

	mu    sync.Mutex
	quiet bool // being stopped: nothing more is narrated

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
	a := &agentProc{node: node, work: work, cmd: cmd, say: say, exited: make(chan struct{})}
	a.log = agentlog.New(a.narrate)
	go func() {
		a.log.Read(r)
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

// narrate says each record in short human form as it is read, before it can be waited on, so
// the lines a wait was for are printed above what the demo says next.
func (a *agentProc) narrate(rec map[string]any) {
	a.mu.Lock()
	quiet := a.quiet
	a.mu.Unlock()
	if s := narrate(rec); s != "" && !quiet {
		a.say(a.node + ": " + s)
	}
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
	rec, err := a.log.Wait(ctx, msg, attrs...)
	if errors.Is(err, agentlog.ErrEnded) {
		<-a.exited
		return nil, fmt.Errorf("%s's agent: %w: it %s", a.node, err, a.how)
	}
	if err != nil {
		return nil, fmt.Errorf("%s's agent: %w", a.node, err)
	}
	return rec, nil
}

// boot is the agent's boot id, once it said it (it does as it starts).
func (a *agentProc) boot() string {
	if i := a.log.Index("agent starting"); i >= 0 {
		if b, ok := a.log.Record(i)["boot"].(string); ok {
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

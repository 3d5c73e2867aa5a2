//go:build linux

package agent

import (
	"bytes"
	"context"
	"fmt"
	"mediator/shared/client"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// statSpace is the room left on the filesystem holding path, to an unprivileged writer.
func statSpace(path string) (Space, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Space{}, err
	}
	bs := uint64(st.Bsize)
	return Space{FreeBytes: st.Bavail * bs, TotalBytes: st.Blocks * bs, FreeInodes: st.Ffree, TotalInodes: st.Files}, nil
}

// fullDisk says why a failed step's failure is the machine's for want of room: the work dir's
// filesystem, or that of the step's working directory, has less room than --min-free asks (no
// space or no inode at all, with --min-free 0). "" when both have room, or cannot be read: no
// guess counts against the node.
func (r *runner) fullDisk(dir string) string {
	for _, d := range []string{r.a.cfg.WorkDir, dir} {
		s, err := statSpace(d)
		if err != nil {
			continue
		}
		why := r.a.cfg.MinFree.Check(d, s)
		if why == "" {
			why = s.Full(d)
		}
		if why != "" {
			return why
		}
	}
	return ""
}

// diskReason is the work dir's own check: why its room is below --min-free, or "".
func (a *Agent) diskReason() string {
	s, err := statSpace(a.cfg.WorkDir)
	if err != nil {
		return Reason(nil, "the work dir's filesystem cannot be read: "+err.Error())
	}
	return a.cfg.MinFree.Check(a.cfg.WorkDir, s)
}

// healthOutputBytes bounds what is kept of a health command's output: its last line is the
// reason, and a command that writes without end must not fill the agent's memory.
const healthOutputBytes = 16 << 10

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	n int
	b []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.n {
		t.b = append(t.b[:0], t.b[len(t.b)-t.n:]...)
	}
	return len(p), nil
}

// HealthTimeout bounds one run of the health command: the interval, within 5 s to 1 min.
func HealthTimeout(every time.Duration) time.Duration {
	return min(max(every, 5*time.Second), time.Minute)
}

// RunHealthCmd runs the health command by /bin/sh -c as a process group of g's, as a step is
// (recorded, so that a crash of the agent leaves nothing of it to a next boot, and never taken
// for a step's stray), killed with its group past timeout or once ctx is done. It returns ""
// when the command exits 0, else the reason: its output's last line, or what ended it.
func (g *groups) RunHealthCmd(ctx context.Context, command, dir string, env []string, timeout time.Duration) string {
	out := &tailBuffer{n: healthOutputBytes}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", command}, Dir: dir, Env: env, Stdout: out, Stderr: out,
		// What left the group holding the output open must not hold up the check.
		WaitDelay: time.Second}
	p, err := g.spawn(cmd, "health-cmd", nil)
	if err != nil {
		return Reason(nil, "the health command could not start: "+err.Error())
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var stopped string
	select {
	case <-p.exited:
	case <-t.C:
		stopped = fmt.Sprintf("the health command did not finish within %s", timeout)
	case <-ctx.Done():
		stopped = "the health command was stopped: the agent is exiting"
	}
	if stopped != "" {
		p.signal(syscall.SIGKILL)
	}
	ps, err := p.finish()
	switch {
	case stopped != "":
		return Reason(nil, stopped)
	case ps == nil:
		return Reason(nil, fmt.Sprintf("the health command: %v", err))
	case exitCode(ps) == 0:
		return ""
	}
	return Reason(bytes.TrimSpace(out.b), fmt.Sprintf("the health command exited %d", exitCode(ps)))
}

// runHealthCmd runs the health command once, in the work dir, with the agent's environment
// less its MEDIATOR_ variables (its credentials are not the command's).
func (a *Agent) runHealthCmd() string {
	var env []string
	for _, kv := range a.environ {
		if !strings.HasPrefix(kv, "MEDIATOR_") {
			env = append(env, kv)
		}
	}
	env = append(env, "MEDIATOR_NODE_ID="+a.cfg.NodeID, "MEDIATOR_WORK_DIR="+a.cfg.WorkDir)
	return a.groups.RunHealthCmd(a.healthCtx, a.cfg.HealthCmd, a.cfg.WorkDir, env, HealthTimeout(a.cfg.HealthEvery))
}

// healthDue: the health command's last run began --health-every ago or more.
func (a *Agent) healthDue() bool {
	return a.cfg.HealthCmd != "" && !a.health.running && time.Since(a.health.last) >= a.cfg.HealthEvery
}

// startHealthCmd runs the health command in a goroutine of its own; its verdict comes back to
// the loop as a healthDone.
func (a *Agent) startHealthCmd() {
	if a.health.running {
		return
	}
	a.health.running, a.health.last = true, time.Now()
	go func() { a.events <- healthDone{reason: a.runHealthCmd()} }()
}

// healthTick is --health-every since the last run: the command runs now unless a step runs,
// when it waits for the lease's end or the next step, whichever comes first.
func (a *Agent) healthTick() {
	a.health.timer.Reset(a.cfg.HealthEvery)
	if len(a.runners) == 0 {
		a.startHealthCmd()
	}
}

func (a *Agent) healthDone(d healthDone) {
	a.health.running, a.health.cmd = false, d.reason
	a.health.timer.Reset(a.cfg.HealthEvery)
	changed := a.updateHealth(true)
	if a.health.waiting {
		a.health.waiting = false
		if !changed {
			a.heartbeatNow() // the steps that waited are listed again
		}
	}
}

// healthFirst says whether a step about to start waits for the health command: it is under way,
// or its last run is --health-every old (the node idle, or busy, that long). The work dir's room
// is looked at again at once.
func (a *Agent) healthFirst() bool {
	a.updateHealth(true)
	if a.healthDue() {
		a.startHealthCmd()
	}
	if a.health.running {
		a.health.waiting = true
		return true
	}
	return false
}

// updateHealth takes the work dir's room again and says whether the node's own verdict
// changed; a change is logged, and heartbeated at once when tell.
func (a *Agent) updateHealth(tell bool) bool {
	a.health.disk = a.diskReason()
	var reasons []string
	for _, r := range []string{a.health.disk, a.health.cmd} {
		if r != "" {
			reasons = append(reasons, r)
		}
	}
	reason := Reason([]byte(strings.Join(reasons, "; ")), "")
	if reason == a.health.reason {
		return false
	}
	was := a.health.reason
	a.health.reason = reason
	switch {
	case reason == "":
		a.log.Info("healthy again: the node lifts its own quarantine", "was", was)
	case was == "":
		a.log.Warn("unhealthy: the node quarantines itself", "reason", reason)
	default:
		a.log.Warn("still unhealthy", "reason", reason)
	}
	if tell {
		a.heartbeatNow()
	}
	return true
}

// noteHealth logs the node's health as the API shows it, when it changes.
func (a *Agent) noteHealth(n client.NodeInfo) {
	by := ""
	if n.QuarantinedBy != nil {
		by = *n.QuarantinedBy
	}
	if n.Health == "" || (n.Health == a.seenHealth && by == a.seenHealthBy) {
		return
	}
	attrs := []any{"health", n.Health, "infra_failures", n.InfraFailures}
	if n.HealthReason != nil {
		attrs = append(attrs, "reason", *n.HealthReason)
	}
	if by != "" {
		attrs = append(attrs, "by", by)
	}
	if n.Health == client.HealthQuarantined {
		a.log.Warn("node health: quarantined, it takes no new lease", attrs...)
	} else {
		a.log.Info("node health: "+n.Health, attrs...)
	}
	a.seenHealth, a.seenHealthBy = n.Health, by
}

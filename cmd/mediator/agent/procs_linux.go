//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// ProcStat is what the agent reads of /proc/<pid>/stat.
type ProcStat struct {
	PID, PPID, Pgrp, Session int
	State                    byte
	// Start is field 22, when the process started (clock ticks after boot): with the pid, it
	// names one process for good, where a pid alone may be reused.
	Start uint64
}

// ParseStat reads /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so the fields after it are counted from its last ")".
func ParseStat(data []byte) (ProcStat, error) {
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return ProcStat{}, errors.New("/proc stat: no (comm)")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc stat: pid: %w", err)
	}
	rest := strings.Fields(string(data[end+1:])) // rest[0] is field 3
	if len(rest) < 20 || len(rest[0]) != 1 {
		return ProcStat{}, errors.New("/proc stat: too few fields")
	}
	s := ProcStat{PID: pid, State: rest[0][0]}
	ints := []*int{&s.PPID, &s.Pgrp, &s.Session} // fields 4, 5, 6
	for i, p := range ints {
		if *p, err = strconv.Atoi(rest[1+i]); err != nil {
			return ProcStat{}, fmt.Errorf("/proc stat: field %d: %w", 4+i, err)
		}
	}
	if s.Start, err = strconv.ParseUint(rest[22-3], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("/proc stat: field 22: %w", err)
	}
	return s, nil
}

func readStat(pid int) (ProcStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	return ParseStat(data)
}

// processes is every process /proc shows now.
func processes() []ProcStat {
	entries, _ := os.ReadDir("/proc")
	out := make([]ProcStat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := readStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// Record is one process group a step runs in, as kept under the work dir while it may live.
type Record struct {
	Pgid    int
	Start   uint64 // its leader's start time
	Session int
	Step    string // run/step/attempt, for the log
}

func (r Record) String() string {
	return fmt.Sprintf("pgid=%d start=%d session=%d step=%s\n", r.Pgid, r.Start, r.Session, r.Step)
}

// ParseRecord reads a record file.
func ParseRecord(data []byte) (Record, error) {
	var r Record
	for _, f := range strings.Fields(string(data)) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "pgid":
			r.Pgid, err = strconv.Atoi(v)
		case "start":
			r.Start, err = strconv.ParseUint(v, 10, 64)
		case "session":
			r.Session, err = strconv.Atoi(v)
		case "step":
			r.Step = v
		}
		if err != nil {
			return r, fmt.Errorf("record: %s: %w", k, err)
		}
	}
	if r.Pgid <= 1 || r.Start == 0 {
		return r, errors.New("record: no pgid or start time")
	}
	return r, nil
}

// groups are the process groups of the steps this agent runs. Each is recorded under dir
// from its start until nothing of it is left, so that the next boot of the agent can kill
// what this one leaves behind if it dies.
//
// The agent is a child subreaper: whatever a step leaves orphaned is re-parented to the agent
// rather than to init, and reaped here, so that once a step is reported nothing of it is left,
// not even a zombie.
type groups struct {
	dir  string
	self int
	// own is the agent's own process group: a child in it is the agent's (a credential
	// process the AWS SDK runs, say), never a step's, and is neither reaped nor killed here.
	own int
	log *slog.Logger

	// mu keeps the reaping of adopted orphans away from the steps' own leaders, which
	// os/exec reaps: a leader is in leaders from before its first chance to exit.
	mu      sync.Mutex
	leaders map[int]bool
}

func newGroups(dir string, log *slog.Logger) *groups {
	return &groups{dir: dir, self: os.Getpid(), own: syscall.Getpgrp(), log: log, leaders: map[int]bool{}}
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// BecomeSubreaper makes this process the reaper of its descendants' orphans.
func BecomeSubreaper() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// proc is one step's process group, from its start until it is reaped.
type proc struct {
	g      *groups
	cmd    *exec.Cmd
	pgid   int
	record string
	// exited is closed once the leader has exited. It is not reaped yet, so its pid, which
	// is the group's id, cannot be reused: signalling the group stays safe until finish.
	exited chan struct{}
}

// spawn starts cmd as the leader of a new process group and records the group; with a cgroup,
// straight into it, so that nothing of the step ever runs outside it.
func (g *groups) spawn(cmd *exec.Cmd, step string, cgroup *os.File) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgroup.Fd())
	}
	g.mu.Lock()
	err := cmd.Start()
	if err == nil {
		g.leaders[cmd.Process.Pid] = true
	}
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	p := &proc{g: g, cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		waitExited(p.pgid)
		close(p.exited)
	}()
	st, err := readStat(p.pgid)
	if err == nil {
		p.record = filepath.Join(g.dir, strconv.Itoa(p.pgid))
		err = writeFile(p.record, Record{Pgid: p.pgid, Start: st.Start, Session: st.Session, Step: step}.String())
	}
	if err != nil {
		// A group the next boot could not find must not run.
		p.signal(syscall.SIGKILL)
		_, _ = p.finish()
		return nil, fmt.Errorf("recording the step's process group: %w", err)
	}
	return p, nil
}

// signal sends sig to the whole group.
func (p *proc) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.g.log.Warn("signalling a step's process group", "pgid", p.pgid, "signal", sig.String(), "error", err.Error())
	}
}

// finish, once the leader has exited, kills whatever the step left in its group, waits until
// none of it runs, reaps the leader and drops the record: a step's processes end with it.
func (p *proc) finish() (*os.ProcessState, error) {
	<-p.exited
	p.signal(syscall.SIGKILL)
	p.g.waitGone(p.pgid, p.pgid, 5*time.Second)
	// Reaped and forgotten under the lock: killAll must never signal a group id that is free.
	p.g.mu.Lock()
	err := p.cmd.Wait()
	delete(p.g.leaders, p.pgid)
	p.g.mu.Unlock()
	p.g.reapOrphans()
	if p.record != "" {
		_ = os.Remove(p.record)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return p.cmd.ProcessState, err
	}
	return p.cmd.ProcessState, nil
}

// waitGone waits, at most max, until no process of group pgid but leader (the caller reaps
// it) runs, reaping the orphans it adopted meanwhile. A zombie runs no more; one of its own
// that is this process's child is reaped.
func (g *groups) waitGone(pgid, leader int, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for {
		g.reapOrphans()
		alive := 0
		for _, s := range processes() {
			if s.Pgrp == pgid && s.PID != leader && (s.State != 'Z' || s.PPID == g.self) {
				alive++
			}
		}
		if alive == 0 {
			return true
		}
		if time.Now().After(deadline) {
			g.log.Warn("processes of a step's group outlived SIGKILL", "pgid", pgid, "processes", alive)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reapOrphans reaps the zombies this process adopted as a subreaper, never a step's leader.
func (g *groups) reapOrphans() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range processes() {
		if g.adopted(s) && s.State == 'Z' {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(s.PID, &ws, syscall.WNOHANG, nil)
		}
	}
}

// adopted: a child of this process that no one else here waits for — an orphan of a step.
func (g *groups) adopted(s ProcStat) bool {
	return s.PPID == g.self && !g.leaders[s.PID] && s.Pgrp != g.own
}

// killStrays kills what steps left running outside their process groups (setsid, a daemon):
// as a subreaper, the agent adopts every orphan of its steps, wherever it went. Killing one
// may orphan its own children, adopted in turn, so it goes on until none is left. It is a
// child of this process until reaped here, so its pid cannot name another process meanwhile.
func (g *groups) killStrays() int {
	killed := 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		found := 0
		g.mu.Lock()
		for _, s := range processes() {
			if g.adopted(s) && s.State != 'Z' && syscall.Kill(s.PID, syscall.SIGKILL) == nil {
				found++
			}
		}
		g.mu.Unlock()
		g.reapOrphans()
		killed += found
		if found == 0 || time.Now().After(deadline) {
			return killed
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pPID is waitid's P_PID.
const pPID = 1

// waitExited blocks until process pid has exited, without reaping it (WNOWAIT): the zombie
// keeps its pid, and so its group's id, from being reused until os/exec reaps it.
func waitExited(pid int) {
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

// KillLeftovers kills what a previous boot of the agent left running under workDir: the whole
// of every cgroup it recorded, then every process group it recorded (all a boot without a
// cgroup leaves to go by), and removes the records. It returns how many cgroups and groups,
// and how many processes, it killed.
func KillLeftovers(workDir string, log *slog.Logger) (killed, processes int, err error) {
	c, n, err := killRecordedCgroups(filepath.Join(workDir, "cgroups"), log)
	if err != nil {
		return c, n, err
	}
	g, m, err := killRecordedGroups(filepath.Join(workDir, "pgroups"), log)
	return c + g, n + m, err
}

// killRecordedGroups kills what a previous boot's process groups left running, from the
// records under dir, and removes the records. A group is killed only while /proc shows its leader with the
// start time recorded; a leader gone with members left behind has those members killed one by
// one, each checked to be of the group, of its session, and started after its leader. A pid
// that now names another process is never hit: while any member of a group lives, its id is
// not reused. It returns how many groups and processes it killed.
func killRecordedGroups(dir string, log *slog.Logger) (groupsKilled, processesKilled int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	var killed []int // pgids
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		data, err := readRegular(path, 4096)
		if err != nil {
			log.Warn("a process-group record that cannot be read; removed", "file", path, "error", err.Error())
			_ = os.Remove(path)
			continue
		}
		r, err := ParseRecord(data)
		if err != nil {
			log.Warn("a process-group record that cannot be read; removed", "file", path, "error", err.Error())
			_ = os.Remove(path)
			continue
		}
		n := 0
		if st, err := readStat(r.Pgid); err == nil {
			if live := len(members(r, 0)); st.Start == r.Start && syscall.Kill(-r.Pgid, syscall.SIGKILL) == nil {
				n = live
			}
		} else {
			for _, pid := range members(r, 0) {
				if st, err := readStat(pid); err == nil && st.Pgrp == r.Pgid && st.Start >= r.Start &&
					syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
			}
		}
		if n > 0 {
			killed = append(killed, r.Pgid)
			groupsKilled++
			processesKilled += n
			log.Info("killed a previous boot's step processes", "step", r.Step, "pgid", r.Pgid, "processes", n)
		}
		_ = os.Remove(path)
	}
	// They are not this process's children: someone else reaps them. Wait until none runs.
	g := &groups{self: os.Getpid(), own: syscall.Getpgrp(), log: log, leaders: map[int]bool{}}
	for _, pgid := range killed {
		g.waitGone(pgid, 0, 5*time.Second)
	}
	return groupsKilled, processesKilled, nil
}

// members are the live processes of r's group (but except), of its session, started with or
// after its leader.
func members(r Record, except int) []int {
	var out []int
	for _, s := range processes() {
		if s.Pgrp == r.Pgid && s.PID != except && s.Session == r.Session && s.Start >= r.Start && s.State != 'Z' {
			out = append(out, s.PID)
		}
	}
	return out
}

// writeFile writes a file whole or not at all.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// killAll kills every step's process group at once, for an agent told to stop a third time.
// Their leaders are not reaped yet, so every group id is still theirs.
func (g *groups) killAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid := range g.leaders {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

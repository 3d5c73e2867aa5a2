//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Steps tracked by cgroup v2, where the agent's own cgroup lets it make children (systemd's
// Delegate=yes, or root on a host that leaves the hierarchy writable). A process cannot leave
// its cgroup the way it leaves a process group (setsid, a double fork), so what a step starts
// is found and killed wherever it went — after a crash of the agent too, which process groups
// and the subreaper cannot do.
//
// The tree, under the agent's own cgroup:
//
//	mediator-<boot>/              this boot's; its path recorded under the work dir first
//	    lease-<epoch>/            one per lease held
//	        step-<n>/             one per step, which is spawned straight into it
//
// A step's process group ends with the step, as without cgroups; what left the group stays in
// the step's cgroup and dies with the lease's (the rule without cgroups too, where the
// subreaper finds it). What a crashed boot recorded is killed whole at the next start.
type cgroups struct {
	boot   string // this boot's cgroup
	record string // the file under the work dir that names it
	log    *slog.Logger
	steps  atomic.Int64
}

// bootCgroupName is a boot's cgroup's name; a record naming anything else is not acted on.
var bootCgroupName = regexp.MustCompile(`^mediator-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// OwnCgroup is the directory of this process's cgroup v2: the "0::" line of /proc/self/cgroup,
// under the cgroup2 mount of /proc/self/mountinfo (at /sys/fs/cgroup, or at
// /sys/fs/cgroup/unified on a hybrid host).
func OwnCgroup() (string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	return ownCgroup(self, mounts)
}

func ownCgroup(self, mountinfo []byte) (string, error) {
	path := ""
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" || !strings.HasPrefix(path, "/") {
		return "", errors.New("no cgroup v2 in /proc/self/cgroup")
	}
	// mountinfo: id parent major:minor root mountpoint options [optional...] - fstype source super
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		root, mountpoint := unescapeMount(fields[3]), unescapeMount(fields[4])
		rel, ok := strings.CutPrefix(path, root)
		if root == "/" {
			rel, ok = path, true
		}
		if ok && (rel == "" || strings.HasPrefix(rel, "/")) {
			return filepath.Join(mountpoint, rel), nil
		}
	}
	return "", errors.New("no cgroup2 mount holds this process's cgroup")
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// newCgroups makes this boot's cgroup under the agent's own and proves a process can be
// spawned into it, or says why it cannot be used.
func newCgroups(recordsDir, boot string, log *slog.Logger) (*cgroups, error) {
	own, err := OwnCgroup()
	if err != nil {
		return nil, err
	}
	c := &cgroups{boot: filepath.Join(own, "mediator-"+boot), record: filepath.Join(recordsDir, boot), log: log}
	// Recorded before it exists: a crash between the two leaves a record of nothing, never a
	// cgroup nobody knows of.
	if err := writeFile(c.record, c.boot+"\n"); err != nil {
		return nil, err
	}
	if err := os.Mkdir(c.boot, 0o755); err != nil {
		_ = os.Remove(c.record)
		return nil, fmt.Errorf("%s is not the agent's to divide (%w): give the agent a delegated cgroup (systemd: Delegate=yes)", own, err)
	}
	if err := c.probe(); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// probe spawns a process the way steps are spawned, into a child of this boot's cgroup.
func (c *cgroups) probe() error {
	dir := filepath.Join(c.boot, "probe")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	defer os.Remove(dir)
	fd, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer fd.Close()
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("spawning into a cgroup (clone3 CLONE_INTO_CGROUP, Linux 5.7): %w", err)
	}
	return nil
}

func (c *cgroups) leaseDir(epoch int64) string {
	return filepath.Join(c.boot, "lease-"+strconv.FormatInt(epoch, 10))
}

// stepGroup makes a new step's cgroup under its lease's and opens it, for the step to be
// spawned into (SysProcAttr.CgroupFD). The caller closes it once the step started.
func (c *cgroups) stepGroup(epoch int64) (*os.File, error) {
	lease := c.leaseDir(epoch)
	if err := os.Mkdir(lease, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	dir := filepath.Join(lease, "step-"+strconv.FormatInt(c.steps.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Open(dir)
}

// removeStep removes a step's cgroup once nothing of it is left in it; what left the step's
// process group keeps it until the lease's end.
func removeStep(fd *os.File) {
	_ = syscall.Rmdir(fd.Name())
}

// killLeases kills everything in the cgroup of every lease but keep (-1: every lease), waits
// until none of it runs, removes those cgroups, and says how many processes it killed.
func (c *cgroups) killLeases(keep int64) int {
	entries, err := os.ReadDir(c.boot)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "lease-") || (keep >= 0 && name == "lease-"+strconv.FormatInt(keep, 10)) {
			continue
		}
		k, err := killTree(filepath.Join(c.boot, name))
		if err != nil {
			c.log.Warn("killing a lease's cgroup", "cgroup", filepath.Join(c.boot, name), "error", err.Error())
		}
		n += k
	}
	return n
}

// release kills whatever is left of this boot's steps and removes its cgroup and record.
func (c *cgroups) release() {
	if _, err := killTree(c.boot); err != nil {
		c.log.Warn("removing this boot's cgroup", "cgroup", c.boot, "error", err.Error())
		return
	}
	_ = os.Remove(c.record)
}

// killTree kills every process of the cgroup dir and its descendants, waits until none is left
// (a zombie is out of its cgroup already), and removes the cgroups, deepest first. It returns
// how many processes it found to kill.
func killTree(dir string) (int, error) {
	dirs, procs := tree(dir)
	if procs > 0 {
		if err := killCgroup(dir, dirs); err != nil {
			return procs, err
		}
		if err := waitEmpty(dir, 5*time.Second); err != nil {
			return procs, err
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			return procs, fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return procs, nil
}

// tree lists dir and the cgroups under it, parents first, and counts their processes.
func tree(dir string) (dirs []string, procs int) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		dirs = append(dirs, path)
		procs += len(pidsOf(path))
		return nil
	})
	return dirs, procs
}

func pidsOf(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killCgroup kills every process of dir's tree: with cgroup.kill (Linux 5.14), else frozen
// first, so that nothing forks between the listing of its processes and their SIGKILL, then
// thawed, which a fatal signal ends.
func killCgroup(dir string, dirs []string) error {
	err := writeControl(dir, "cgroup.kill", "1")
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := writeControl(dir, "cgroup.freeze", "1"); err != nil {
		return err
	}
	// Thawed whatever happens: a fatal signal ends a frozen process only once it thaws.
	defer func() { _ = writeControl(dir, "cgroup.freeze", "0") }()
	if err := waitEvent(dir, "frozen 1", 5*time.Second); err != nil {
		return err
	}
	for _, d := range dirs {
		for _, pid := range pidsOf(d) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

func writeControl(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(value)
	return err
}

// waitEmpty waits, at most max, until no process is left in dir's tree.
func waitEmpty(dir string, max time.Duration) error { return waitEvent(dir, "populated 0", max) }

// waitEvent waits, at most max, until dir's cgroup.events holds the line want.
func waitEvent(dir, want string, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed: nothing is left in it
			}
			return err
		}
		if slices.Contains(strings.Split(string(data), "\n"), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q after %s", dir, want, max)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killRecordedCgroups kills what the cgroups of a previous boot still hold, from the records
// under dir, and removes the cgroups and the records. A record is acted on only when it names
// a boot's cgroup (mediator-<uuid>) on a cgroup2 file system that does not hold this process:
// a record a step rewrote cannot make the agent kill anything else.
func killRecordedCgroups(dir string, log *slog.Logger) (cgroupsKilled, processesKilled int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	own, _ := OwnCgroup()
	for _, e := range entries {
		record := filepath.Join(dir, e.Name())
		data, err := readRegular(record, 4096)
		path := strings.TrimSpace(string(data))
		switch {
		case err != nil:
			log.Warn("a cgroup record that cannot be read; removed", "file", record, "error", err.Error())
		case !bootCgroupName.MatchString(filepath.Base(path)) || !onCgroup2(path) ||
			(own != "" && (own == path || strings.HasPrefix(own, path+"/"))):
			log.Warn("a cgroup record that names no boot's cgroup; removed", "file", record, "cgroup", path)
		default:
			n, err := killTree(path)
			if err != nil {
				log.Error("a previous boot's cgroup could not be emptied", "cgroup", path, "error", err.Error())
				return cgroupsKilled, processesKilled, err
			}
			if n > 0 {
				cgroupsKilled++
				processesKilled += n
				log.Info("killed a previous boot's step processes", "cgroup", path, "processes", n)
			}
		}
		_ = os.Remove(record)
	}
	return cgroupsKilled, processesKilled, nil
}

// cgroup2SuperMagic is statfs's f_type of a cgroup v2 file system.
const cgroup2SuperMagic = 0x63677270

func onCgroup2(path string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return errors.Is(err, syscall.ENOENT) && onCgroup2(filepath.Dir(path)) // gone already: nothing to kill, the record goes
	}
	return st.Type == cgroup2SuperMagic
}

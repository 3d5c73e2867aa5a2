//go:build linux

package agent

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may choose.
	line := "4242 (my (odd) prog) S 1 4240 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != 4242 || s.State != 'S' || s.PPID != 1 || s.Pgrp != 4240 || s.Session != 4200 || s.Start != 987654 {
		t.Fatalf("got %+v", s)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2", "x (y) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 9"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	me, err := readStat(os.Getpid())
	if err != nil || me.PID != os.Getpid() || me.Start == 0 {
		t.Fatalf("this process: %+v %v", me, err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{Pgid: 77, Start: 123456, Session: 70, Step: "run/step/1"}
	got, err := ParseRecord([]byte(r.String()))
	if err != nil || got != r {
		t.Fatalf("got %+v %v", got, err)
	}
	if _, err := ParseRecord([]byte("pgid=1 start=5")); err == nil {
		t.Fatal("pgid 1 taken")
	}
	if _, err := ParseRecord([]byte("garbage")); err == nil {
		t.Fatal("garbage taken")
	}
}

// killRecordedGroups kills a recorded group, leader and members, while its leader is the process
// recorded; a record whose start time is not the process's own is never acted on.
func TestKillLeftovers(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	group := func() (leader, member int) {
		cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $!; wait")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		var b [32]byte
		n, _ := out.Read(b[:])
		m, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
		if err != nil {
			t.Fatalf("the member's pid: %q", b[:n])
		}
		return cmd.Process.Pid, m
	}
	record := func(pid int, start uint64) {
		st, err := readStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		if start == 0 {
			start = st.Start
		}
		if err := writeFile(filepath.Join(dir, strconv.Itoa(pid)), Record{Pgid: pid, Start: start, Session: st.Session, Step: "r/s/1"}.String()); err != nil {
			t.Fatal(err)
		}
	}
	alive := func(pid int) bool {
		st, err := readStat(pid)
		return err == nil && st.State != 'Z'
	}

	doomed, doomedMember := group()
	record(doomed, 0)
	spared, sparedMember := group()
	record(spared, 1) // as if the pid were another process's now

	g, n, err := killRecordedGroups(dir, log)
	if err != nil || g != 1 || n != 2 {
		t.Fatalf("killed %d groups, %d processes (%v); want 1, 2", g, n, err)
	}
	if alive(doomed) || alive(doomedMember) {
		t.Fatal("the recorded group lives on")
	}
	if !alive(spared) || !alive(sparedMember) {
		t.Fatal("a group whose recorded start time is not its own was killed")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("records left: %v", entries)
	}
	if err := syscall.Kill(spared, 0); errors.Is(err, syscall.ESRCH) {
		t.Fatal("spared is gone")
	}
}

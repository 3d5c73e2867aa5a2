//go:build linux

package main

import (
	"io"
	"log/slog"
	"syscall"

	"mediator/cmd/mediator/agent"
)

// agentOS: the agent runs here.
const agentOS = true

// agentProcAttr puts an agent in a process group of its own, and has the kernel kill it if
// the demo dies without stopping it (SIGKILL, a test binary's timeout).
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group pid leads.
func killGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }

// killLeftovers kills the steps an agent stopped with SIGKILL left running, from the records
// of their process groups under its work dir (each checked by its start time, so a pid used
// again since is never hit).
func killLeftovers(work string) {
	_, _, _ = agent.KillLeftovers(work, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

//go:build !linux

package main

import (
	"os"
	"syscall"
)

// agentOS: the agent refuses to start on any other system, and the demo with it.
const agentOS = false

func agentProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func killLeftovers(string) {}

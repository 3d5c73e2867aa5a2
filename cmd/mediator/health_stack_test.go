//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mediator/shared/client"
)

// These tests need the server's side of node health (the failure kind, the unhealthy
// heartbeat, quarantine, the node's history, health checks): they pass against a stack that
// has it.

// admin runs the command line as an admin against base.
func admin(t *testing.T, base string, args ...string) result {
	t.Helper()
	cmd, stdout, stderr := command(base, "", args...)
	cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-admin")
	return ended(t, cmd.Run(), stdout, stderr)
}

func nodeInfo(t *testing.T, base, id string) client.NodeInfo {
	t.Helper()
	d, err := api(t, base, "dev-admin").GetNode(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d.Node
}

// smallFilesystem is a tmpfs of size bytes of the test's own, unmounted at its end.
func smallFilesystem(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a %s tmpfs (the test runs as root): %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Three infra failures in a row quarantine the node (the system's); the run after queues. An
// admin lifting it with no check registered makes it healthy, and the run is placed. An admin's
// quarantine holds against the node's own heartbeats, and `mediator node` shows the history.
func TestInfraFailuresQuarantineTheNodeAndAnAdminLiftsIt(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "q-1", agentOpts{labels: []string{"kind=q"}})
	n.waitFor("heartbeating")
	broken := spec("cmd", "echo the board does not answer; exit 75", "infra_exit_codes", []int{75})
	for i, run := range []string{"q1", "q2", "q3"} {
		submit(t, base, client.RunRequest{RunID: run, Needs: []string{"kind=q"}, Steps: []client.StepRequest{{ID: "s", Spec: broken}}})
		n.waitFor("step reported", "run", run, "status", "failed", "failure", "infra")
		if got := nodeInfo(t, base, "q-1"); got.InfraFailures != i+1 {
			t.Fatalf("after %s: %d infra failures, want %d", run, got.InfraFailures, i+1)
		}
	}
	got := nodeInfo(t, base, "q-1")
	if got.Health != client.HealthQuarantined || deref(got.QuarantinedBy) != "system" {
		t.Fatalf("after three infra failures: %s by %s", got.Health, deref(got.QuarantinedBy))
	}
	ok := spec("cmd", "echo fine")
	if s := submit(t, base, client.RunRequest{RunID: "q4", Needs: []string{"kind=q"}, Steps: []client.StepRequest{{ID: "s", Spec: ok}}}); !s.Queued() {
		t.Fatalf("q4 on a quarantined node: %d, want 202", s.Status)
	}
	expect(t, admin(t, base, "nodes"), 0, "HEALTH", "q-1", "quarantined", "by system")
	expect(t, admin(t, base, "node", "q-1"), 0, "node q-1:", "quarantined", "3 infra failure(s) in a row", "KIND", "health", "suspect", "lease", "q3")
	expect(t, mediator(t, base, "", "node", "q-1"), 3, "403")

	expect(t, admin(t, base, "unquarantine", "q-1"), 0, "node q-1:", "healthy")
	n.waitFor("step reported", "run", "q4", "status", "succeeded")
	if got := nodeInfo(t, base, "q-1"); got.Health != client.HealthHealthy || got.InfraFailures != 0 {
		t.Fatalf("after a success: %s, %d infra failures", got.Health, got.InfraFailures)
	}

	expect(t, admin(t, base, "quarantine", "q-1"), 3, "--reason is needed")
	expect(t, admin(t, base, "quarantine", "q-1", "--reason", "rewiring the hub"), 0, "quarantined", "rewiring the hub")
	n.waitFor("node health: quarantined", "by", "admin:dev-admin")
	if s := submit(t, base, client.RunRequest{RunID: "q5", Needs: []string{"kind=q"}, Steps: []client.StepRequest{{ID: "s", Spec: ok}}}); !s.Queued() {
		t.Fatalf("q5 on an admin's quarantine: %d, want 202", s.Status)
	}
	expect(t, admin(t, base, "nodes"), 0, "rewiring the hub", "by admin:dev-admin")
	expect(t, admin(t, base, "unquarantine", "q-1"), 0, "healthy")
	n.waitFor("step reported", "run", "q5", "status", "succeeded")
}

// Test failures never count against the node.
func TestTestFailuresLeaveTheNodeHealthy(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "t-1", agentOpts{labels: []string{"kind=t"}})
	n.waitFor("heartbeating")
	for _, run := range []string{"t1", "t2", "t3", "t4", "t5"} {
		submit(t, base, client.RunRequest{RunID: run, Needs: []string{"kind=t"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "exit 1")}}})
		n.waitFor("step reported", "run", run, "status", "failed", "failure", "test")
	}
	if got := nodeInfo(t, base, "t-1"); got.Health != client.HealthHealthy || got.InfraFailures != 0 {
		t.Fatalf("after five test failures: %s, %d infra failures", got.Health, got.InfraFailures)
	}
}

// An agent whose --health-cmd fails quarantines its node itself from its first heartbeat: it
// never gets a lease, and shows quarantined with the command's last line as the reason. Once
// the command passes, it lifts its own quarantine and gets work, without an admin.
func TestAgentHealthCmdQuarantinesItsNodeUntilItPasses(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	flag := filepath.Join(t.TempDir(), "hub-ok")
	check := `echo checking the hub; test -e "` + flag + `" || { echo "usb hub 1-1 is gone"; exit 1; }`
	n := startAgent(t, base, "h-1", agentOpts{labels: []string{"kind=h"}, args: []string{"--health-cmd", check, "--health-every", "1s"}})
	n.waitFor("unhealthy: the node quarantines itself", "reason", "usb hub 1-1 is gone")
	n.waitFor("heartbeating")
	n.waitFor("node health: quarantined", "reason", "usb hub 1-1 is gone", "by", "self")
	if s := submit(t, base, client.RunRequest{RunID: "h", Needs: []string{"kind=h"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}}); !s.Queued() {
		t.Fatalf("h on a node failing its health command: %d, want 202", s.Status)
	}
	expect(t, admin(t, base, "nodes"), 0, "h-1", "quarantined", "usb hub 1-1 is gone", "by self")

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n.waitFor("healthy again: the node lifts its own quarantine")
	n.waitFor("step reported", "run", "h", "status", "succeeded")
	if n.index("lease taken", "run", "h") < n.index("healthy again") {
		t.Fatal("the node took a lease while its health command failed")
	}
	if got := nodeInfo(t, base, "h-1"); got.Health == client.HealthQuarantined {
		t.Fatalf("after the command passed: %s", got.Health)
	}
}

// A node whose work dir is on a small filesystem that a step fills: the step fails as the
// machine's failure (no space left), the node quarantines itself for want of space, and the
// next run is not placed on it; once the space is freed, it recovers by itself.
func TestAgentQuarantinesItselfWhenAStepFillsItsDisk(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	disk := smallFilesystem(t, "8m")
	work, blob := filepath.Join(disk, "work"), filepath.Join(disk, "blob")
	n := startAgent(t, base, "disk-1", agentOpts{labels: []string{"kind=disk"}, work: work})
	n.waitFor("heartbeating")
	submit(t, base, client.RunRequest{RunID: "fill", Needs: []string{"kind=disk"}, Steps: []client.StepRequest{
		{ID: "s", Spec: spec("cmd", `dd if=/dev/zero of="$BLOB" bs=64k`, "env", map[string]string{"BLOB": blob})}}})
	n.waitFor("step failed", "run", "fill", "failure", "infra")
	if why, _ := n.waitFor("unhealthy: the node quarantines itself")["reason"].(string); !strings.HasPrefix(why, "low disk space under "+work+": ") {
		t.Fatalf("the node's own reason: %q", why)
	}
	n.waitFor("node health: quarantined", "by", "self")
	if s := submit(t, base, client.RunRequest{RunID: "after", Needs: []string{"kind=disk"}, Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}}); !s.Queued() {
		t.Fatalf("after, on a full node: %d, want 202", s.Status)
	}
	r := getRun(t, base, "fill").Run
	if s := step(t, r, "s"); !strings.Contains(text(s.Message), "low disk space under "+work) {
		t.Fatalf("fill's message: %q", text(s.Message))
	}

	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	n.waitFor("healthy again: the node lifts its own quarantine")
	n.waitFor("step reported", "run", "after", "status", "succeeded")
}

// Health checks from the command line: put from a YAML file, list, get, delete, admins only.
func TestHealthChecksFromTheCommandLine(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	check := file(t, "usb.yaml", "needs: [kind=hc]\nevery_seconds: 86400\nsteps:\n  - {id: probe, spec: {cmd: echo the hub answers}}\n")
	expect(t, mediator(t, base, "", "health-check", "put", "usb", "-f", check), 3, "403")
	expect(t, admin(t, base, "health-check", "put", "usb", "-f", check), 0, "health check usb registered", "kind=hc", "probe", "every 1d")
	expect(t, admin(t, base, "health-check", "put", "usb", "-f", check), 0, "health check usb registered")
	expect(t, admin(t, base, "health-check", "list"), 0, "NAME", "usb", "kind=hc", "probe", "1d")
	expect(t, admin(t, base, "health-check", "get", "usb"), 0, "health check usb", "probe")
	expect(t, admin(t, base, "health-check", "put", "usb"), 3, "-f FILE is needed")
	expect(t, admin(t, base, "health-check", "delete", "usb"), 0, "health check usb removed")
	expect(t, admin(t, base, "health-check", "list"), 0, "no health checks")
	expect(t, admin(t, base, "health-check", "get", "usb"), 3, "404")
}

// With a health check registered, an admin lifting a quarantine puts the check on the node
// first: the real agent runs it before the run that queued for the node, the node is healthy
// once it passed, and the queued run is placed next. `mediator runs` shows the check's kind.
func TestAHealthCheckRunsBeforeTheQueuedRun(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	check := file(t, "hub.yaml", "needs: [kind=hc2]\nsteps:\n  - {id: probe, spec: {cmd: echo the hub answers}}\n")
	expect(t, admin(t, base, "health-check", "put", "hub", "-f", check), 0, "health check hub registered")
	n := startAgent(t, base, "hc2-1", agentOpts{labels: []string{"kind=hc2"}})
	n.waitFor("heartbeating")
	expect(t, admin(t, base, "quarantine", "hc2-1", "--reason", "reseating the board"), 0, "quarantined")
	if s := submit(t, base, client.RunRequest{RunID: "after-check", Needs: []string{"kind=hc2"},
		Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "echo ran")}}}); !s.Queued() {
		t.Fatalf("a run on a quarantined node: %d, want 202", s.Status)
	}
	expect(t, admin(t, base, "unquarantine", "hc2-1"), 0, "suspect", "a health check is due")
	n.waitFor("step reported", "run", "after-check", "status", "succeeded")
	page, err := api(t, base, "dev-admin").ListRuns(context.Background(), client.ListRunsParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var checkRun string
	for _, r := range page.Runs {
		if r.Kind == client.KindHealthCheck {
			checkRun = r.RunID
		}
	}
	if checkRun == "" {
		t.Fatalf("no health_check run among %+v", page.Runs)
	}
	if n.index("step reported", "run", checkRun, "status", "succeeded") > n.index("lease taken", "run", "after-check") {
		t.Fatal("the queued run took the node before its health check passed")
	}
	if got := nodeInfo(t, base, "hc2-1"); got.Health != client.HealthHealthy || got.HealthCheckDue {
		t.Fatalf("after the check passed: %s, check due %v", got.Health, got.HealthCheckDue)
	}
	expect(t, admin(t, base, "runs"), 0, checkRun, "health_check")
}

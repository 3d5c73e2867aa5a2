package infra_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mediator/localdev/prerequisites"
)

// The agent's systemd unit is one systemd itself accepts, with the settings the agent's
// behaviour depends on: a stop reaches the agent first (it drains), a crash restarts it.
func TestAgentUnitVerifies(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile("mediator-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nKillMode=mixed\n", "\nKillSignal=SIGTERM\n", "\nRestart=on-failure\n",
		"\nExecStart=/usr/local/bin/mediator agent ", "\nExecReload=/bin/kill -HUP $MAINPID\n", "\nDelegate=yes\n"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze verifies the agent's unit: " + prerequisites.Need("systemd"))
	}
	// systemd checks that ExecStart names an executable: the real binary, built here.
	dir := t.TempDir()
	bin := filepath.Join(dir, "mediator")
	build := exec.Command("go", "build", "-o", bin, "../cmd/mediator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build mediator: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "mediator-agent.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/mediator"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify only warns about a value it cannot parse: any output at all is a finding.
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

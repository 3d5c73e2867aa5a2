//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// The agent tells the machine's failures from the test's: a step exiting with one of its
// spec's infra_exit_codes, a program or a workdir missing on the node, are the machine's
// (infra); any other exit, and a spec the agent cannot read (the submitter's mistake), the
// test's. Each run fails saying why.
func TestAgentTellsInfraFromTestFailures(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "i-1", agentOpts{labels: []string{"kind=i"}})
	n.waitFor("heartbeating")
	for _, tc := range []struct {
		run     string
		spec    map[string]any
		logged  string // the record that classifies the failure
		failure string
		says    string
	}{
		// The test's failures first: three of the machine's in a row quarantine the node.
		{"test", spec("cmd", "echo 2 tests failed; exit 3", "infra_exit_codes", []int{75}), "step failed", "test", "2 tests failed"},
		{"badspec", spec("cmd", "true", "duration", "1s"), "a spec the agent cannot run", "", `unknown field "duration"`},
		{"board", spec("cmd", "echo the board does not answer; exit 75", "infra_exit_codes", []int{75, 76}), "step failed", "infra",
			"exit 75 is one of the spec's infra_exit_codes: counted against the node"},
		{"noprog", spec("argv", []string{"no-such-flasher"}), "the step could not start", "infra", `"no-such-flasher": not found in the step's PATH`},
		{"nodir", spec("cmd", "true", "workdir", "/no/such/board/dir"), "the step could not start", "infra", "workdir /no/such/board/dir is not a directory on node i-1"},
	} {
		submit(t, base, client.RunRequest{RunID: tc.run, Needs: []string{"kind=i"}, Steps: []client.StepRequest{{ID: "s", Spec: tc.spec}}})
		n.waitFor("step reported", "run", tc.run, "status", "failed")
		attrs := []string{"run", tc.run}
		if tc.failure != "" {
			attrs = append(attrs, "failure", tc.failure)
		}
		if n.index(tc.logged, attrs...) < 0 {
			t.Fatalf("%s: no %q record with %v", tc.run, tc.logged, attrs)
		}
		r := getRun(t, base, tc.run).Run
		if s := step(t, r, "s"); r.State != wire.Failed || !strings.Contains(text(s.Message), tc.says) {
			t.Fatalf("%s: run %s, the message %q does not say %q", tc.run, r.State, text(s.Message), tc.says)
		}
	}
}

// The step outputs kept on the node are bounded by their total size as well as by their
// number: the oldest go first, the newest stays.
func TestAgentKeepsOutputsWithinTheirBytes(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	n := startAgent(t, base, "b-1", agentOpts{labels: []string{"kind=b"}, args: []string{"--keep-output-bytes", "20KiB"}})
	n.waitFor("heartbeating")
	var steps []client.StepRequest
	for i, id := range []string{"a", "b", "c", "d"} {
		s := client.StepRequest{ID: id, Spec: spec("cmd", "head -c 8192 /dev/zero | tr '\\0' x")}
		if i > 0 {
			s.After = []string{steps[i-1].ID}
		}
		steps = append(steps, s)
	}
	submit(t, base, client.RunRequest{RunID: "big", Needs: []string{"kind=b"}, Steps: steps})
	n.waitFor("step reported", "run", "big", "step", "d", "status", "succeeded")
	entries, err := os.ReadDir(filepath.Join(n.work, "output"))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var names []string
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		names = append(names, e.Name())
	}
	if total > 20<<10 || len(names) != 2 || names[0] != "big+c+1.log" || names[1] != "big+d+1.log" {
		t.Fatalf("kept %v, %d bytes: want the newest two, within 20 KiB", names, total)
	}
}

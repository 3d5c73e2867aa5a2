package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"

	"mediator/localdev/apitest"
	"mediator/localdev/fleet"
	"mediator/localdev/mediatorbin"
	"mediator/shared/client"
	"mediator/shared/wire"
)

// bin is the mediator binary these tests run, built once for the test binary.
var bin string

// atExit runs when the tests have ended, before the binary exits: the console tests' browser.
var atExit []func()

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "mediator-cli-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if bin, err = mediatorbin.Build(context.Background(), dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		code := m.Run()
		for _, f := range atExit {
			f()
		}
		return code
	}())
}

// serve is a test's Mediator: a database of its own, the real handlers behind the local
// gateway on a loopback port, as `make dev` serves them.
func serve(t *testing.T) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t)
	return env, env.Serve()
}

// result is how a mediator process ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// command is a mediator process against base as the development client, with nothing of this
// process's own MEDIATOR_ settings.
func command(base string, stdin string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEDIATOR_") && !strings.HasPrefix(kv, "NO_COLOR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "MEDIATOR_URL="+base, "MEDIATOR_TOKEN=dev-client")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

func ended(t *testing.T, err error, stdout, stderr *bytes.Buffer) result {
	t.Helper()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// mediator runs the binary to its end.
func mediator(t *testing.T, base, stdin string, args ...string) result {
	t.Helper()
	cmd, stdout, stderr := command(base, stdin, args...)
	return ended(t, cmd.Run(), stdout, stderr)
}

// start runs the binary in the background; wait collects its end.
func start(t *testing.T, base string, args ...string) (wait func() result) {
	t.Helper()
	cmd, stdout, stderr := command(base, "", args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return func() result { return ended(t, cmd.Wait(), stdout, stderr) }
}

func file(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func api(t *testing.T, base, token string) *client.Client {
	t.Helper()
	c, err := client.New(base, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// node runs a simulated agent (board=rpi4) until the test ends, and returns what it says.
func node(t *testing.T, base, id string) *narration {
	t.Helper()
	said := &narration{t: t, changed: make(chan struct{})}
	n := &fleet.Node{ID: id, Labels: []string{"board=rpi4"}, Base: base, Token: "dev-node-" + id,
		Interval: 20 * time.Millisecond, Log: said.add}
	if _, err := n.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return said
}

// narration is what a node said, in order, and a channel closed at each new line: a test
// waits for what the node did, not for the clock.
type narration struct {
	t       *testing.T
	mu      sync.Mutex
	lines   []string
	read    int
	changed chan struct{}
}

func (s *narration) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor consumes lines until one contains want. The deadline only turns a node that never
// gets there into a failure instead of a hang.
func (s *narration) waitFor(want string) {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		for s.read < len(s.lines) {
			line := s.lines[s.read]
			s.read++
			if strings.Contains(line, want) {
				s.mu.Unlock()
				return
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			s.t.Fatalf("the node never said %q; it said:\n%s", want, strings.Join(s.lines, "\n"))
		}
	}
}

func expect(t *testing.T, r result, code int, contains ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d; got %s", code, r)
	}
	for _, want := range contains {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Fatalf("the output does not say %q:\n%s", want, r)
		}
	}
}

// submit -f run.yaml --wait follows the run and exits with how it ended: 0 SUCCEEDED, 1
// FAILED (a step failed), 2 CANCELLED (cancelled while the command waits).
func TestWaitExitsWithHowTheRunEnded(t *testing.T) {
	t.Parallel()
	t.Run("succeeded", func(t *testing.T) {
		t.Parallel()
		_, base := serve(t)
		node(t, base, "n1")
		run := file(t, "run.yaml", `run_id: ok
needs: [board=rpi4]
steps:
  - id: build
    spec: {duration: 50ms}
  - id: test
    after: [build]
    spec: {duration: 50ms}
`)
		expect(t, mediator(t, base, "", "submit", "-f", run, "--wait"), 0, "run ok: RUNNING", "run ok: SUCCEEDED · steps 2/2")
	})
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		_, base := serve(t)
		node(t, base, "n1")
		run := file(t, "run.yaml", "run_id: bad\nneeds: [board=rpi4]\nsteps:\n  - {id: flash, spec: {duration: 20ms, exit_code: 3}}\n  - {id: test, after: [flash]}\n")
		expect(t, mediator(t, base, "", "submit", "-f", run, "--wait"), 1, "run bad: FAILED step_failed", "step flash failed (exit 3)")
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		_, base := serve(t)
		said := node(t, base, "n1")
		run := file(t, "run.json", `{"run_id":"c","needs":["board=rpi4"],"steps":[{"id":"s","spec":{"duration":"1h"}}]}`)
		wait := start(t, base, "submit", "-f", run, "--wait")
		said.waitFor("c/s started")
		if _, err := api(t, base, "dev-client").Cancel(context.Background(), "c", client.CancelRequest{Reason: "enough"}); err != nil {
			t.Fatal(err)
		}
		said.waitFor("c/s cancelled -> run CANCELLED")
		expect(t, wait(), 2, "run c: RUNNING (cancel_requested)", "run c: step s CANCELLED", "run c: CANCELLED", "cancelled: enough")
	})
}

// A run no node of the fleet could ever serve is refused (422): exit 1, naming what no node has.
func TestARefusalExits1AndNamesTheUnmetNeeds(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	env.Heartbeat("n1", "b1", false, "board=rpi4")
	run := file(t, "run.yaml", "run_id: g\nroles:\n  trainer: {needs: [gpu, cuda=12]}\n  feeder: {needs: [board=rpi4]}\nsteps:\n  - {id: train, role: trainer}\n  - {id: feed, role: feeder}\n")
	expect(t, mediator(t, base, "", "submit", "-f", run), 1, "run g: FAILED no_capable_node", "(422)", "role trainer needs cuda=12,gpu")
	// The same file again is the same request: 200 with the run as it ended, which FAILED.
	expect(t, mediator(t, base, "", "submit", "-f", run, "--wait"), 1, "run g: FAILED no_capable_node (200")
	r := mediator(t, base, "", "submit", "-f", run, "--run-id", "g2", "--wait", "-o", "json")
	expect(t, r, 3, "--run-id")
	r = mediator(t, base, strings.Replace(readFile(t, run), "run_id: g", "run_id: g2", 1), "submit", "-f", "-", "--wait", "-o", "json")
	expect(t, r, 1)
	var body struct {
		Run   client.Run     `json:"run"`
		Unmet []client.Unmet `json:"unmet"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || len(body.Unmet) != 1 || body.Unmet[0].Role != "trainer" {
		t.Fatalf("--output json: %v\n%s", err, r)
	}
	// A dry run says as much, storing nothing.
	dry := file(t, "dry.yaml", "needs: [gpu]\nsteps: [{id: s}]\n")
	expect(t, mediator(t, base, "", "submit", "-f", dry, "--dry-run"), 1, "impossible", "role main needs gpu")
	ok := file(t, "ok.yaml", "needs: [board=rpi4]\nsteps: [{id: s}]\n")
	expect(t, mediator(t, base, "", "submit", "-f", ok, "--dry-run"), 0, "placeable", "main → n1")
}

// The YAML and the JSON of one run are one request: whichever is submitted second is answered
// 200 with the run the first made. Numbers are kept as written, anchors and merges resolved,
// dates kept as text.
func TestYAMLAndJSONOfOneRunAreTheSameRequest(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	env.Heartbeat("n1", "b1", false, "board=rpi4")
	env.Heartbeat("n2", "b1", false, "board=rpi4")
	yamlRun := func(id string) string {
		return `run_id: ` + id + `
needs: [board=rpi4]
max_attempts: 2
metadata: {team: net, ratio: 1.0, big: 1e3, hex: 0x10, day: 2026-11-30, quoted: "yes", none: null, list: [1, two, 3.50]}
steps:
  - id: build
    spec: &spec {duration: 10ms, threads: 4, cmd: "make -j4"}
  - id: test
    after: [build]
    spec:
      <<: *spec
      cmd: make test
`
	}
	jsonRun := func(id string) string {
		return `{
  "steps": [
    {"id": "build", "spec": {"cmd": "make -j4", "duration": "10ms", "threads": 4}},
    {"spec": {"threads": 4, "duration": "10ms", "cmd": "make test"}, "after": ["build"], "id": "test"}
  ],
  "metadata": {"list": [1, "two", 3.50], "none": null, "quoted": "yes", "day": "2026-11-30", "hex": 16, "big": 1e3, "ratio": 1.0, "team": "net"},
  "max_attempts": 2,
  "needs": ["board=rpi4"],
  "run_id": "` + id + `"
}`
	}
	expect(t, mediator(t, base, "", "submit", "-f", file(t, "a.yaml", yamlRun("y-first"))), 0, "run y-first: RUNNING", "(201)")
	expect(t, mediator(t, base, "", "submit", "-f", file(t, "a.json", jsonRun("y-first"))), 0, "run y-first: RUNNING (200")
	expect(t, mediator(t, base, jsonRun("j-first"), "submit", "-f", "-"), 0, "run j-first: RUNNING", "(201)")
	expect(t, mediator(t, base, yamlRun("j-first"), "submit", "-f", "-"), 0, "run j-first: RUNNING (200")
	// Something else under a used run_id is a conflict, not the same run.
	other := strings.Replace(yamlRun("y-first"), "threads: 4", "threads: 8", 1)
	expect(t, mediator(t, base, other, "submit", "-f", "-"), 3, "409 run_id_conflict")
	if n := env.Count(`SELECT count(*) FROM runs`); n != 2 {
		t.Fatalf("%d runs stored, want 2", n)
	}
}

// A malformed run is a 400 listing every problem's path; the command exits 3.
func TestA400PrintsEveryFieldPath(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	run := file(t, "run.yaml", "run_id: d\nneeds: [board=rpi4]\ncolour: 1\nsteps:\n  - {id: x, after: [y]}\n  - {id: x, retries: -1}\n")
	r := mediator(t, base, "", "submit", "-f", run)
	expect(t, r, 3, "400 invalid_request", "steps[0].after[0]:", "colour: unknown field", "steps[1].id:", "steps[1].retries:")
}

// runs --all --output json follows every page and prints one object, as one page would be.
func TestRunsAllAsJSONIsOneObject(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	env.Heartbeat("n1", "b1", false, "board=rpi4")
	c := api(t, base, "dev-client")
	for i := range 5 {
		if _, err := c.Submit(context.Background(), client.RunRequest{RunID: fmt.Sprintf("r%d", i), Needs: []string{"board=rpi4"},
			Steps: []client.StepRequest{{ID: "s"}}}); err != nil {
			t.Fatal(err)
		}
	}
	r := mediator(t, base, "", "runs", "--all", "--limit", "2", "--output", "json")
	expect(t, r, 0)
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var all struct {
		Runs []client.Run `json:"runs"`
		Next *string      `json:"next"`
	}
	if err := dec.Decode(&all); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON value:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, `"next":null`) || len(all.Runs) != 5 || all.Runs[0].RunID != "r4" || all.Runs[4].RunID != "r0" {
		t.Fatalf("got %d runs, next %v:\n%s", len(all.Runs), all.Next, r.stdout)
	}
	// One page, as a table, says there is more.
	expect(t, mediator(t, base, "", "runs", "--limit", "2"), 0, "RUN ID", "r4", "r3", "queue position 3", "more: mediator runs --after ")
	expect(t, mediator(t, base, "", "runs", "--state", "queued", "--all"), 0, "r3", "r1")
}

// The other commands, as a session would use them; --output json prints the API's body as
// received.
func TestASession(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	said := node(t, base, "n1")
	generated := mediator(t, base, "needs: [board=rpi4]\nsteps: [{id: s, spec: {duration: 1h}}]\n", "submit", "-f", "-")
	expect(t, generated, 0, "placed on its nodes (201)", "main → n1")
	first, _, _ := strings.Cut(generated.stdout, "\n")
	fields := strings.Fields(first)
	if len(fields) < 2 || fields[0] != "run_id" {
		t.Fatalf("the made run_id is not printed first:\n%s", generated)
	}
	id, err := uuid.Parse(fields[1])
	if err != nil || id.Version() != 7 {
		t.Fatalf("run_id %q is not a UUIDv7: %v", fields[1], err)
	}
	runID := id.String()
	said.waitFor(runID + "/s started")
	expect(t, mediator(t, base, "", "run", runID), 0, "run "+runID+": RUNNING", "ROLE", "main  board=rpi4  n1", "STEP", "s     main  RUNNING",
		"WHEN", "submitted")
	expect(t, mediator(t, base, "", "queue"), 0, "the queue is empty")
	expect(t, mediator(t, base, "", "nodes"), 3, "403 forbidden")
	admin := func(args ...string) result {
		cmd, stdout, stderr := command(base, "", args...)
		cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN=dev-admin")
		return ended(t, cmd.Run(), stdout, stderr)
	}
	expect(t, admin("nodes"), 0, "NODE", "n1", "leased", "board=rpi4")
	expect(t, admin("leases"), 0, "EPOCH", runID, "yes")
	expect(t, admin("--token", "dev-client", "leases"), 3, "403")

	// A run queued behind it at priority 20, raised by an admin, found by its priority.
	expect(t, mediator(t, base, "run_id: later\nneeds: [board=rpi4]\nsteps: [{id: s}]\n", "submit", "-f", "-", "--priority", "20"),
		0, "run later: QUEUED at queue position 0 (202)")
	expect(t, mediator(t, base, "", "queue"), 0, "BY PRIORITY", "1×20")
	expect(t, mediator(t, base, "", "priority", "later", "90"), 3, "403")
	expect(t, admin("priority", "later", "90"), 0, "run later: priority 90, QUEUED at queue position 0")
	expect(t, mediator(t, base, "", "runs", "--priority", "90"), 0, "later")
	if r := mediator(t, base, "", "runs", "--priority", "20"); strings.Contains(r.stdout, "later") {
		t.Fatalf("runs --priority 20 lists a run of priority 90:\n%s", r)
	}

	expect(t, mediator(t, base, "", "cancel", runID, "--reason", "done here"), 0, "cancel requested", "(202)")
	said.waitFor(runID + "/s cancelled -> run CANCELLED")
	expect(t, mediator(t, base, "", "cancel", runID), 3, "409 run_not_live", "ended CANCELLED")

	r := mediator(t, base, "", "run", runID, "-o", "json")
	detail, err := api(t, base, "dev-client").GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || r.stdout != string(detail.Body)+"\n" {
		t.Fatalf("run -o json is not the API's body:\n%s\nwant:\n%s", r, detail.Body)
	}
	expect(t, mediator(t, base, "", "run", "nope"), 3, "404 not_found")
	expect(t, mediator(t, base, "", "version"), 0, "mediator ")
}

// Mistakes of the caller exit 3 before anything is sent; an API that cannot be reached exits 4.
func TestUsageAndUnavailable(t *testing.T) {
	t.Parallel()
	run := file(t, "run.yaml", "run_id: a\nneeds: [x]\nsteps: [{id: s}]\n")
	unreachable := "http://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"submit", "-f", run, "--run-id", "b"}, 3, `--run-id "b" differs from the file's run_id "a"`},
		{[]string{"submit"}, 3, "-f FILE"},
		{[]string{"submit", "-f", filepath.Join(t.TempDir(), "none.yaml")}, 3, "no run file"},
		{[]string{"submit", "-f", file(t, "two.yaml", "a: 1\n---\nb: 2\n")}, 3, "more than one YAML document"},
		{[]string{"submit", "-f", file(t, "dup.yaml", "run_id: a\nrun_id: b\n")}, 3, `"run_id" is given twice`},
		{[]string{"submit", "-f", run, "--dry-run", "--wait"}, 3, "--dry-run"},
		{[]string{"submit", "-f", run, "--priority", "101"}, 3, "--priority must be from 0 to 100"},
		{[]string{"submit", "-f", file(t, "p.yaml", "run_id: a\npriority: 10\n"), "--priority", "20"}, 3, "--priority 20 differs from the file's priority 10"},
		{[]string{"priority", "a", "high"}, 3, "from 0 to 100"},
		{[]string{"priority", "a"}, 3, "takes two arguments"},
		{[]string{"frobnicate"}, 3, "unknown command"},
		{[]string{"run"}, 3, "takes one argument"},
		{[]string{"runs", "--state", "LOST"}, 3, "--state must be one of"},
		{[]string{"runs", "--output", "yaml"}, 3, "--output must be table or json"},
		{[]string{"runs", "--no-such-flag"}, 3, "unknown flag"},
		{[]string{"runs", "--timeout", "300ms"}, 4, "connection refused"},
		{[]string{"submit", "-f", run, "--timeout", "300ms"}, 4, "connection refused"},
	} {
		r := mediator(t, unreachable, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("mediator %s: want exit %d saying %q; got %s", strings.Join(tc.args, " "), tc.code, tc.says, r)
		}
	}
	help := mediator(t, unreachable, "", "help")
	expect(t, help, 0, "Exit codes:", "0    the run SUCCEEDED", "4    the API is unavailable")
}

// bidiControls are the embeddings, overrides and isolates: characters that reorder the rest
// of a line on a terminal that applies the bidirectional algorithm.
var bidiControls = []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}

// acting is what of s a terminal would act on rather than show (a control, C0 or C1, or a
// bidi control), but the characters in allow.
func acting(s, allow string) []rune {
	var out []rune
	for _, r := range s {
		if (unicode.IsControl(r) || slices.Contains(bidiControls, r)) && !strings.ContainsRune(allow, r) {
			out = append(out, r)
		}
	}
	return out
}

// shows checks that a command exited with code, printed nothing a terminal would act on but
// its newlines, and said each of wants. What it printed is quoted in a failure, so that the
// test's own log is not acted on.
func shows(t *testing.T, what string, r result, code int, wants ...string) {
	t.Helper()
	quoted := fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
	if r.code != code {
		t.Errorf("%s: want exit %d; got %s", what, code, quoted)
	}
	if raw := acting(r.stdout+r.stderr, "\n"); len(raw) > 0 {
		t.Errorf("%s prints %q raw:\n%s", what, raw, quoted)
	}
	for _, want := range wants {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, quoted)
		}
	}
}

// Text from the API is shown with what a terminal would act on escaped: a step's message
// (reported by the node through the result route), a cancel's reason, a node's labels and a
// problem's field path, in the tables and lines of run, runs, nodes, submit --wait and an
// error. --output json is still the API's answer byte for byte.
func TestTextFromTheAPIIsShownEscaped(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	ctx := context.Background()
	const (
		message = "\x1b]0;pwned\a\x1b[2J\x1b[31mFAKE: run SUCCEEDED\r\u009b32m\x7f\u202egnp.exe\nsecond line"
		reason  = "\x1b[1Aall good\a\u2066!"
		label   = "team=\x1b[5mops\u0085"
		// What a reader sees of them.
		shownMessage = `\x1b]0;pwned\a\x1b[2J\x1b[31mFAKE: run SUCCEEDED\r\u009b32m\x7f\u202egnp.exe`
		shownReason  = `\x1b[1Aall good\a\u2066!`
		shownLabel   = `team=\x1b[5mops\u0085`
	)
	n1 := api(t, base, "dev-node-n1")
	beat := func() *client.HeartbeatReply {
		t.Helper()
		hb, err := n1.Heartbeat(ctx, "n1", client.HeartbeatRequest{BootID: "b1", Labels: []string{"board=rpi4"}})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	beat()
	run := file(t, "run.yaml", "run_id: esc\nneeds: [board=rpi4]\nsteps: [{id: s}]\n")
	expect(t, mediator(t, base, "", "submit", "-f", run), 0, "placed on its nodes (201)")
	lease := beat().Lease
	if lease == nil {
		t.Fatal("n1 holds no lease for run esc")
	}
	report := func(r client.ReportRequest) {
		t.Helper()
		r.NodeID, r.BootID, r.Epoch = "n1", "b1", lease.Epoch
		if _, err := n1.Report(ctx, "esc", "s", r); err != nil {
			t.Fatal(err)
		}
	}
	report(client.ReportRequest{Status: wire.ReportStarted})
	expect(t, mediator(t, base, "", "cancel", "esc", "--reason", reason), 0, "cancel requested")
	exit, msg := 3, message
	report(client.ReportRequest{Status: wire.ReportFailed, ExitCode: &exit, Message: &msg})
	// The API refuses such a label in a heartbeat; written where the API reads labels from, it
	// stands for a server that sends one: the CLI escapes what it is sent, whatever was checked.
	env.Exec(`UPDATE nodes SET labels = $1 WHERE node_id = 'n1'`, []string{"board=rpi4", label})

	// The same file again with --wait is the same run, which has ended: it says how.
	shows(t, "submit --wait", mediator(t, base, "", "submit", "-f", run, "--wait"), 2, "run esc: CANCELLED",
		"step s failed (exit 3): "+shownMessage+"\n    second line\n", "cancelled: "+shownReason+"\n")
	shows(t, "run", mediator(t, base, "", "run", "esc"), 0, "run esc: CANCELLED", ": "+shownReason+"\n",
		"FAILED  ", shownMessage+"…")
	shows(t, "runs", mediator(t, base, "", "runs"), 0, "esc ", "CANCELLED")
	shows(t, "nodes", mediator(t, base, "", "--token", "dev-admin", "nodes"), 0, "board=rpi4,"+shownLabel)
	bad := file(t, "bad.json", `{"run_id":"bad","needs":["board=rpi4"],"steps":[{"id":"s"}],"\u009b2J\u202eevil":1}`)
	shows(t, "a 400", mediator(t, base, "", "submit", "-f", bad), 3, "400 invalid_request", `  ["\u009b2J\u202eevil"]: unknown field`)

	// --output json: what the API sent, the same text as was reported, requested and stored.
	r := mediator(t, base, "", "run", "esc", "-o", "json")
	detail, err := api(t, base, "dev-client").GetRun(ctx, "esc")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || r.stdout != string(detail.Body)+"\n" {
		t.Fatalf("run -o json is not the API's body: %q\nwant: %q", r.stdout, detail.Body)
	}
	if got := detail.Run.Steps[0].Message; got == nil || *got != message || deref(detail.Run.CancelReason) != reason {
		t.Fatalf("run -o json has message %q, cancel reason %q", deref(got), deref(detail.Run.CancelReason))
	}
	var nodes client.NodeList
	if r := mediator(t, base, "", "--token", "dev-admin", "nodes", "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &nodes) != nil ||
		len(nodes.Nodes) != 1 || !slices.Contains(nodes.Nodes[0].Labels, label) {
		t.Fatalf("nodes -o json: %q", r.stdout)
	}
	var problem struct {
		Errors []client.FieldError `json:"errors"`
	}
	if r := mediator(t, base, "", "submit", "-f", bad, "-o", "json"); json.Unmarshal([]byte(r.stdout), &problem) != nil ||
		!slices.Contains(problem.Errors, client.FieldError{Path: "[\"\u009b2J\u202eevil\"]", Message: "unknown field"}) {
		t.Fatalf("a 400 -o json: %q", r.stdout)
	}
}

// A queued run says why it waits, in the submit's answer, `mediator run` and `mediator runs`,
// and a submit that queues for a node that is offline warns of it on stderr.
func TestAQueuedRunSaysWhyItWaits(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	env.Heartbeat("gpu-1", "b1", false, "gpu")
	env.Exec(`UPDATE nodes SET advert_expires_at = now() - interval '1 second' WHERE node_id = 'gpu-1'`)
	run := func(id string) string {
		return `{"run_id":"` + id + `","needs":["gpu"],"steps":[{"id":"t","spec":{"cmd":"true"}}]}`
	}
	r := mediator(t, base, run("train"), "submit", "-f", "-")
	expect(t, r, 0, "run train: QUEUED at queue position 0 (202)", "waits: no_live_node", "role main (gpu): 1 offline")
	if !strings.Contains(r.stderr, `mediator: warning: no live node can serve role "main" (needs gpu): the one node that could is offline`) {
		t.Fatalf("no warning on stderr:\n%s", r)
	}
	expect(t, mediator(t, base, "", "run", "train"), 0, "waits: no_live_node — every node that could serve a role is offline")
	// A second gpu joins and takes train; the next run waits for it, and says whose it is.
	env.Heartbeat("gpu-2", "b1", false, "gpu")
	r = mediator(t, base, run("next"), "submit", "-f", "-")
	expect(t, r, 0, "waits: all_busy", "role main (gpu): 1 busy (train) · 1 offline")
	if strings.Contains(r.stderr, "warning") {
		t.Fatalf("a warning for a run a live node could serve:\n%s", r)
	}
	r = mediator(t, base, "", "runs", "--state", "QUEUED")
	expect(t, r, 0, "all_busy")
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/oauth2/clientcredentials"

	"mediator/cmd/mediator/agent"
	"mediator/localdev/prerequisites"
	"mediator/localdev/testdb"
	"mediator/shared/client"
)

// readmeReplays are the README's sessions, each a run of "## " sections, in the order they
// come, that one terminal types against the make dev its first command starts.
var readmeReplays = []struct {
	name     string
	sections []string
	// cli: the session runs the mediator an earlier one built (make cli); the replay puts
	// this test's build of it on the PATH.
	cli bool
}{
	{name: "first", sections: []string{"Two commands", "A session with curl", "A session with the command line"}},
	{name: "jwt", sections: []string{"Tokens that renew: client credentials, and `make dev AUTH=jwt`"}, cli: true},
}

// readmePatience bounds each wait of the replay — a command, make dev's start, an agent's
// first heartbeat: a failure detector, never a pace. A pick-up waits for the node's next
// heartbeat, up to 20 s at make dev's cadence, and make dev may first compile.
const readmePatience = 5 * time.Minute

// The README's sessions replay as written: every `$ ` line of their sh blocks is run, in
// order, by one bash per session — as a newcomer's terminal would run them — against the real
// `make dev` its first command names (make dev, make dev AUTH=jwt; on free ports and a fresh
// database), with the agents the README starts (real `mediator agent` processes) and the curl
// and jq of the system; what each prints is compared with the lines the README shows under it.
// The README is held to what Mediator does, and Mediator to what the README promises.
//
// The transcript's form:
//   - a line starting `$ ` is a command; lines ending in `\` go on to the next, and a
//     here-document's lines to its terminator;
//   - the lines after it, to the next command or the block's end, are what it prints: stdout
//     and stderr as one terminal shows them;
//   - `...` or `…` within a line stands for any text, and a line of only `...` for any lines;
//   - a line starting `#` is a remark, and so is `  # ...` at the end of a line; a remark that
//     says "exit N" is the command's exit status, which is checked.
//
// What cannot be the same from one run to the next is normalised on both sides, by
// readmeNormal: times and durations ("12.3s", "just now", "in 57s", timestamps), UUIDs (boot
// ids, made run ids), request ids, the column padding those change, and the database make
// dev's banner names (the test's is DATABASE_URL's, the README's the local cluster's). The
// addresses are the one thing the replay changes: 127.0.0.1:3000 (the API) and 127.0.0.1:3001
// (AUTH=jwt's issuer) in a command are make dev's free ports, MEDIATOR_URL says the API's for
// the CLI's default, and the test's temp dir is mktemp's.
//
// The replay waits for state as a person would, who types the next line long after what the
// last one started is up: after a command that starts `mediator agent ... &`, until that node
// has heartbeated with the agent's boot, read from the API. Nothing waits on the clock.
func TestREADMESessions(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Fatal("the README's command-line sessions start mediator agent, which runs on Linux only")
	}
	for _, tool := range []string{"bash", "curl", "jq", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's sessions run %s: %s", tool, prerequisites.Need(tool))
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readmeReplays {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			entries := readTranscripts(t, filepath.Join(root, "README.md"), r.sections...)
			if !strings.HasPrefix(entries[0].command, "make dev") {
				t.Fatalf("README.md:%d: the session under ## %s should begin with `$ make dev`, not `$ %s`",
					entries[0].line, r.sections[0], entries[0].command)
			}
			env := sessionEnv()
			dev := makeDev(t, root, env, entries[0])
			tmp := t.TempDir()
			shellEnv := append(env, "MEDIATOR_URL="+dev.base, "TMPDIR="+tmp)
			if r.cli {
				shellEnv = append(shellEnv, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			}
			sh := startShell(t, root, shellEnv)
			for _, e := range entries[1:] {
				command := dev.toLocal.Replace(e.command)
				node := agentNode(command)
				before := ""
				if node != "" {
					before = bootOf(t, dev.admin, node)
				}
				out, code := sh.run(command)
				if node != "" {
					waitForBoot(t, dev.admin, node, before)
				}
				got := lines(strings.ReplaceAll(dev.toREADME.Replace(out), tmp, "/tmp"))
				if !matchTranscript(e.expect, got) {
					t.Errorf("README.md:%d: $ %s\nthe README shows:\n%s\nit prints:\n%s", e.line, e.command,
						indent(e.expect), indent(got))
				}
				if e.exit >= 0 && code != e.exit {
					t.Errorf("README.md:%d: $ %s\nthe README says exit %d; it exits %d", e.line, e.command, e.exit, code)
				}
			}
		})
	}
}

// transcript is one command of a README session and what the README shows it printing.
type transcript struct {
	line    int
	command string   // as bash reads it: continuation lines and a here-document included
	expect  []string // what it prints, the README's remarks left out
	exit    int      // the exit status a remark gives, or -1
}

var (
	heredoc      = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_]+)['"]?`)
	outputRemark = regexp.MustCompile(`\s{2,}#\s.*$`)
	commandNote  = regexp.MustCompile(`\s#\s(.*)$`)
	exitRemark   = regexp.MustCompile(`\bexit (\d+)\b`)
)

// readTranscripts reads the `$ ` commands of the sh blocks under the named "## " headings.
func readTranscripts(t *testing.T, path string, sections ...string) []transcript {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Split(string(raw), "\n")
	var out []transcript
	heading, block, found := "", "", map[string]int{} // block: the open fence's language, "" outside one
	for i := 0; i < len(src); i++ {
		line := src[i]
		switch {
		case block == "" && strings.HasPrefix(line, "## "):
			heading = strings.TrimPrefix(line, "## ")
			continue
		case strings.HasPrefix(line, "```"):
			if block == "" {
				block = "text"
				if lang := strings.TrimPrefix(line, "```"); lang != "" {
					block = lang
				}
			} else {
				block = ""
			}
			continue
		case block != "sh" || !strings.HasPrefix(line, "$ ") || !slices.Contains(sections, heading):
			continue
		}
		found[heading]++
		e := transcript{line: i + 1, command: strings.TrimPrefix(line, "$ "), exit: -1}
		if m := commandNote.FindStringSubmatch(e.command); m != nil {
			e.exit = exitOf(m[1])
		}
		for strings.HasSuffix(src[i], `\`) && i+1 < len(src) {
			i++
			e.command += "\n" + src[i]
		}
		if m := heredoc.FindStringSubmatch(e.command); m != nil {
			for i+1 < len(src) {
				i++
				e.command += "\n" + src[i]
				if strings.TrimSpace(src[i]) == m[1] {
					break
				}
			}
		}
		for i+1 < len(src) && !strings.HasPrefix(src[i+1], "$ ") && src[i+1] != "```" {
			i++
			if strings.HasPrefix(src[i], "#") {
				continue
			}
			shown := src[i]
			if m := outputRemark.FindString(shown); m != "" {
				if code := exitOf(m); code >= 0 {
					e.exit = code
				}
				shown = strings.TrimSuffix(shown, m)
			}
			e.expect = append(e.expect, shown)
		}
		e.expect = trimBlank(e.expect)
		out = append(out, e)
	}
	for _, s := range sections {
		if found[s] == 0 {
			t.Fatalf("README.md has no `$ ` commands under ## %s", s)
		}
	}
	return out
}

func exitOf(remark string) int {
	if m := exitRemark.FindStringSubmatch(remark); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return -1
}

func trimBlank(ls []string) []string {
	for len(ls) > 0 && strings.TrimSpace(ls[len(ls)-1]) == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return trimBlank(strings.Split(s, "\n"))
}

func indent(ls []string) string {
	return "    " + strings.Join(ls, "\n    ")
}

// readmeNormal is what of a line may differ from one replay to the next, in the order the
// rewrites apply; each applies to the README's line and to the output alike.
var readmeNormal = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`^  PostgreSQL: .*$`), "  PostgreSQL: <database>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<uuid>"},
	{regexp.MustCompile(`\blocal-[0-9a-f]+\b`), "local-<id>"},
	{regexp.MustCompile(`\bjust now\b`), "<duration> ago"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h|d)(\d+(\.\d+)?(ms|s|m|h))*\b`), "<duration>"},
	{regexp.MustCompile(`  +`), "  "},
	{regexp.MustCompile(`\s+$`), ""},
}

func normalise(line string) string {
	for _, n := range readmeNormal {
		line = n.re.ReplaceAllString(line, n.to)
	}
	return line
}

// matchTranscript reports whether got is what the README shows, line by line.
func matchTranscript(shown, got []string) bool {
	pats := make([]*regexp.Regexp, len(shown)) // nil: a line of only "...", any lines
	for i, s := range shown {
		s = normalise(s)
		if t := strings.TrimSpace(s); t == "..." || t == "…" {
			continue
		}
		var parts []string
		for _, p := range strings.Split(strings.ReplaceAll(s, "…", "..."), "...") {
			parts = append(parts, regexp.QuoteMeta(p))
		}
		pats[i] = regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
	}
	norm := make([]string, len(got))
	for i, g := range got {
		norm[i] = normalise(g)
	}
	var match func(p []*regexp.Regexp, g []string) bool
	match = func(p []*regexp.Regexp, g []string) bool {
		switch {
		case len(p) == 0:
			return len(g) == 0
		case p[0] == nil:
			for skip := 0; skip <= len(g); skip++ {
				if match(p[1:], g[skip:]) {
					return true
				}
			}
			return false
		}
		return len(g) > 0 && p[0].MatchString(g[0]) && match(p[1:], g[1:])
	}
	return match(pats, norm)
}

// sessionEnv is this process's environment without what would change the session: the
// CLI's settings, the colour switch, the database and port of another stack, and what an
// enclosing make (make test) hands its children, which would make `make cli` say where it is.
func sessionEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "MEDIATOR_"), name == "NO_COLOR", name == "DATABASE_URL", name == "PORT", name == "S3_PORT",
			name == "FRESH", name == "AUTH", name == "MAKEFLAGS", name == "MFLAGS", name == "GNUMAKEFLAGS", name == "MAKELEVEL":
		default:
			env = append(env, kv)
		}
	}
	if _, err := exec.LookPath("go"); err != nil { // `go test` from an IDE may not have it on PATH
		env = append(env, "PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return env
}

// output gathers a process's stdout and stderr, as one terminal shows them, line by line.
type output struct {
	lines chan string
	done  chan struct{}
}

func gather(r io.Reader) *output {
	o := &output{lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
		close(o.lines)
	}()
	return o
}

// group is a process started in a process group of its own, so that it and whatever it
// started can be signalled together.
func group(cmd *exec.Cmd) (*output, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	return gather(r), nil
}

// stopGroup ends a process group with sig and waits for its leader, then kills what is left.
func stopGroup(cmd *exec.Cmd, sig syscall.Signal) {
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// devStack is a make dev the replay started.
type devStack struct {
	base  string         // the API's URL
	admin *client.Client // an admin of it, to see the nodes by
	// toLocal rewrites the README's addresses (127.0.0.1:3000, and :3001 for AUTH=jwt's
	// issuer) to this make dev's; toREADME rewrites them back.
	toLocal, toREADME *strings.Replacer
}

// makeDev runs the README's make dev command (`make dev`, `make dev AUTH=jwt`: make and its
// arguments) in root, on free ports and a fresh database, until the test ends; checks that it
// printed what the README shows, through its banner's last line; and returns it.
func makeDev(t *testing.T, root string, env []string, shown transcript) devStack {
	t.Helper()
	args := strings.Fields(shown.command)[1:]
	jwt := slices.Contains(args, "AUTH=jwt")
	// The administrative login, as a user's own server would be: make dev prepares the database
	// for its roles, which the migrator alone may not.
	dbURL := testdb.Admin(testdb.URL(t))
	for try := 0; ; try++ {
		port, issuerPort, s3Port := freePort(t), freePort(t), freePort(t)
		host, issuerHost := "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(issuerPort)
		s3Host := "127.0.0.1:" + strconv.Itoa(s3Port)
		cmd := exec.Command("make", args...)
		cmd.Dir = root
		cmd.Env = append(env[:len(env):len(env)], "PORT="+strconv.Itoa(port), "ISSUER_PORT="+strconv.Itoa(issuerPort),
			"S3_PORT="+strconv.Itoa(s3Port), "DATABASE_URL="+dbURL)
		out, err := group(cmd)
		if err != nil {
			t.Fatal(err)
		}
		var printed []string
		deadline := time.After(readmePatience)
	read:
		for {
			select {
			case line, ok := <-out.lines:
				if !ok {
					break read
				}
				printed = append(printed, line)
				if strings.HasPrefix(line, "  try: curl ") {
					break read
				}
			case <-deadline:
				stopGroup(cmd, syscall.SIGTERM)
				t.Fatalf("make dev printed no banner in %s:\n%s", readmePatience, indent(printed))
			}
		}
		if !strings.HasPrefix(printed[len(printed)-1], "  try: curl ") {
			stopGroup(cmd, syscall.SIGTERM)
			if try < 2 && strings.Contains(strings.Join(printed, "\n"), "address already in use") {
				continue // another process took a free port first
			}
			t.Fatalf("$ %s ended:\n%s", shown.command, indent(printed))
		}
		// The server logs every request: the pipe is drained until the test ends, or it
		// would fill and stall the API.
		go func() {
			for range out.lines {
			}
		}()
		t.Cleanup(func() { stopGroup(cmd, syscall.SIGTERM) })
		dev := devStack{
			base:     "http://" + host,
			toLocal:  strings.NewReplacer("127.0.0.1:3000", host, "127.0.0.1:3001", issuerHost, "127.0.0.1:3002", s3Host),
			toREADME: strings.NewReplacer(host, "127.0.0.1:3000", issuerHost, "127.0.0.1:3001", s3Host, "127.0.0.1:3002"),
		}
		got := lines(dev.toREADME.Replace(strings.Join(printed, "\n")))
		if !matchTranscript(shown.expect, got) {
			t.Errorf("README.md:%d: $ %s\nthe README shows:\n%s\nit prints:\n%s", shown.line, shown.command, indent(shown.expect), indent(got))
		}
		// The admin's routes are people's routes: with AUTH=jwt, an admin client's tokens.
		auth := client.Auth(client.Bearer("dev-admin"))
		if jwt {
			auth = client.NewClientCredentials(clientcredentials.Config{
				ClientID: "dev-ops", ClientSecret: "dev-ops-secret", TokenURL: "http://" + issuerHost + "/oauth2/token",
			}, nil)
		}
		if dev.admin, err = client.New(dev.base, client.WithAuth(auth)); err != nil {
			t.Fatal(err)
		}
		return dev
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// shell is one bash that runs the session's commands one after the other, keeping its
// variables, functions, directory and background jobs from one to the next.
type shell struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *output
	mark string
}

func startShell(t *testing.T, dir string, env []string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = dir, env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := group(cmd)
	if err != nil {
		t.Fatal(err)
	}
	s := &shell{t: t, cmd: cmd, in: in, out: out, mark: fmt.Sprintf("--- end of command %d ---", os.Getpid())}
	t.Cleanup(func() {
		// The agents drain at a first signal and cancel their steps at a second, then exit:
		// what they ran ends with them.
		_, _ = s.send(`for p in $(jobs -p); do kill -INT "$p"; kill -TERM "$p"; done; wait`)
		_ = in.Close()
		stopGroup(cmd, syscall.SIGTERM)
	})
	return s
}

// run runs one command and returns what it printed and its exit status.
func (s *shell) run(command string) (string, int) {
	s.t.Helper()
	out, code := s.send(command)
	if code < 0 {
		s.t.Fatalf("$ %s\ndid not end within %s; it printed:\n%s", command, readmePatience, out)
	}
	return out, code
}

// send writes command to the shell, its standard input the empty file (the shell's own is
// where the next commands come from, for no command to read), and reads what it prints up to
// the status the shell prints after it; -1 when it does not end in time.
func (s *shell) send(command string) (string, int) {
	fmt.Fprintf(s.in, "{\n%s\n} </dev/null\nprintf '\\n%s %%d\\n' \"$?\"\n", command, s.mark)
	var got []string
	deadline := time.After(readmePatience)
	for {
		select {
		case line, ok := <-s.out.lines:
			if !ok {
				return strings.Join(got, "\n"), -1
			}
			if rest, ok := strings.CutPrefix(line, s.mark+" "); ok {
				code, _ := strconv.Atoi(rest)
				// The status line begins with a newline of its own: the output's last line is
				// the one before it, ended or not.
				if n := len(got); n > 0 && got[n-1] == "" {
					got = got[:n-1]
				}
				return strings.Join(got, "\n"), code
			}
			got = append(got, line)
		case <-deadline:
			return strings.Join(got, "\n"), -1
		}
	}
}

var agentNodeID = regexp.MustCompile(`\bmediator agent\b.*--node-id[= ](\S+)`)

// agentNode is the node a command starts an agent for in the background, or "".
func agentNode(command string) string {
	if m := agentNodeID.FindStringSubmatch(command); m != nil && strings.HasSuffix(strings.TrimSpace(command), "&") {
		return m[1]
	}
	return ""
}

func bootOf(t *testing.T, admin *client.Client, node string) string {
	t.Helper()
	nodes, err := admin.ListNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.BootID
		}
	}
	return ""
}

// waitForBoot waits until node has heartbeated with a boot other than before: its new agent's.
func waitForBoot(t *testing.T, admin *client.Client, node, before string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(readmePatience)
	for {
		if boot := bootOf(t, admin, node); boot != "" && boot != before {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("node %s never heartbeated from its new agent", node)
		}
	}
}

// The run `mediator submit --help` shows is one to copy: a valid run whose every step has a
// spec the agent runs.
func TestSubmitHelpShowsARunTheAgentRuns(t *testing.T) {
	t.Parallel()
	help := mediator(t, "http://127.0.0.1:1", "", "submit", "--help")
	_, example, ok := strings.Cut(help.stdout, "in JSON or YAML:\n\n")
	example, _, _ = strings.Cut(example, "\n\n")
	if help.code != 0 || !ok || example == "" {
		t.Fatalf("submit --help shows no example run:\n%s", help)
	}
	var yamlText strings.Builder
	for _, l := range strings.Split(example, "\n") {
		yamlText.WriteString(strings.TrimPrefix(l, "  ") + "\n")
	}
	run, err := loadRun([]byte(yamlText.String()), "", func() string { return "made" })
	if err != nil {
		t.Fatalf("the example of submit --help is no run: %v\n%s", err, yamlText.String())
	}
	var body struct {
		Steps []struct {
			ID   string          `json:"id"`
			Spec json.RawMessage `json:"spec"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(run.body, &body); err != nil || len(body.Steps) == 0 {
		t.Fatalf("the example's steps: %v\n%s", err, run.body)
	}
	for _, st := range body.Steps {
		if _, err := agent.ParseSpec(st.Spec); err != nil {
			t.Errorf("the agent refuses step %s of submit --help's example: %v", st.ID, err)
		}
	}
}

// The command line builds for macOS, where the README has a newcomer run make cli: only the
// agent is Linux's, and there it refuses to start, saying so.
func TestTheCommandLineBuildsForMacOS(t *testing.T) {
	t.Parallel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "build", "-o", filepath.Join(t.TempDir(), "mediator"), ".")
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=darwin go build ./cmd/mediator: %v\n%s", err, out)
	}
}

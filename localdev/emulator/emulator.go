// Package emulator runs Mediator's compiled bootstraps under the AWS Lambda Runtime Interface
// Emulator — what `sam local invoke` runs inside its container — so tests invoke the real
// binaries the way Lambda does, without AWS.
package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"mediator/localdev/prerequisites"
)

// Module is the emulator, at the version the project pins.
const Module = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// Install finds aws-lambda-rie on PATH or in GOBIN, and installs it with `go install` when it
// is in neither.
func Install(ctx context.Context) (string, error) {
	if p, err := exec.LookPath("aws-lambda-rie"); err == nil {
		return p, nil
	}
	gobin, err := goEnv(ctx, "GOBIN")
	if err != nil {
		return "", err
	}
	if gobin == "" {
		gopath, err := goEnv(ctx, "GOPATH")
		if err != nil {
			return "", err
		}
		gobin = filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin")
	}
	bin := filepath.Join(gobin, "aws-lambda-rie")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", Module)
	cmd.Dir = os.TempDir() // outside the module: go install pkg@version needs no go.mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", Module, err, out)
	}
	return bin, nil
}

func goEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	return strings.TrimSpace(string(out)), err
}

// Build builds each named function with the target `sam build` runs, `make
// build-<LogicalId>` (submit is SubmitFunction), into outDir/<name>/bootstrap, for this machine
// so the emulator can run it here. It returns name → bootstrap.
func Build(ctx context.Context, moduleRoot, outDir string, names ...string) (map[string]string, error) {
	return build(ctx, moduleRoot, outDir, names, "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
}

// BuildDeployed builds each named function as `sam build` does, `make build-<LogicalId>` with
// nothing overridden, so the bootstraps are the linux/arm64 ones that deploy. Run them with
// StartUnder and Arm64Runner.
func BuildDeployed(ctx context.Context, moduleRoot, outDir string, names ...string) (map[string]string, error) {
	return build(ctx, moduleRoot, outDir, names)
}

// build runs make for each function with vars on its command line. The first builds alone and
// fills the build cache with what they share; the rest then only compile their own package and
// link, side by side.
func build(ctx context.Context, moduleRoot, outDir string, names []string, vars ...string) (map[string]string, error) {
	outDir, err := filepath.Abs(outDir) // make runs in moduleRoot
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, name := range names {
		bins[name] = filepath.Join(outDir, name, "bootstrap")
	}
	one := func(name string) error {
		target := "build-" + strings.ToUpper(name[:1]) + name[1:] + "Function"
		args := append([]string{"--no-print-directory", target, "ARTIFACTS_DIR=" + filepath.Dir(bins[name])}, vars...)
		cmd := exec.CommandContext(ctx, "make", args...)
		cmd.Dir = moduleRoot
		cmd.Env = withoutMakeFlags(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("make %s: %w\n%s", target, err, out)
		}
		return nil
	}
	if len(names) == 0 {
		return bins, nil
	}
	if err := one(names[0]); err != nil {
		return nil, err
	}
	errs := make([]error, len(names)-1)
	var wg sync.WaitGroup
	for i, name := range names[1:] {
		wg.Go(func() { errs[i] = one(name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return bins, nil
}

// Qemu is the user-mode emulator that runs a linux/arm64 bootstrap on another machine.
const Qemu = "qemu-aarch64-static"

// Arm64Runner is what runs a linux/arm64 bootstrap on this machine: nothing on linux/arm64,
// elsewhere qemu-aarch64-static, named as the command with the bootstrap as its argument
// (running the bootstrap itself would need a binfmt_misc handler, which a container cannot
// register).
func Arm64Runner() (string, error) {
	if runtime.GOOS == "linux" && runtime.GOARCH == "arm64" {
		return "", nil
	}
	p, err := exec.LookPath(Qemu)
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH: on this %s/%s machine it is what runs the linux/arm64 bootstraps that deploy; %s",
			Qemu, runtime.GOOS, runtime.GOARCH, prerequisites.Need("qemu-user-static"))
	}
	return p, nil
}

// withoutMakeFlags drops what an enclosing make (`make test`) hands its children: its
// command-line variables and job server would otherwise reach the make that Build runs.
func withoutMakeFlags(env []string) []string {
	var out []string
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "MAKEFLAGS", "MFLAGS", "GNUMAKEFLAGS", "MAKELEVEL":
		default:
			out = append(out, kv)
		}
	}
	return out
}

// Function is one bootstrap running under the emulator.
type Function struct {
	Name string
	addr string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// StartUnder runs the bootstrap under the emulator with env (the function's configuration).
// The emulator runs `runner ./bootstrap` in the bootstrap's directory, runner being what runs a
// bootstrap built for another machine (Arm64Runner); an empty runner runs the bootstrap itself.
func StartUnder(ctx context.Context, rie, runner, bootstrap, name string, env []string) (*Function, error) {
	// A port freeAddrs chose can be taken by another process before the emulator binds it;
	// the emulator then exits, and a fresh pair of ports is tried.
	var err error
	for range 3 {
		var f *Function
		if f, err = startOnce(ctx, rie, runner, bootstrap, name, env); err == nil {
			return f, nil
		}
		if !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, err
}

var errExited = errors.New("the emulator exited")

func startOnce(ctx context.Context, rie, runner, bootstrap, name string, env []string) (*Function, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	addr, api := addrs[0], addrs[1]
	command := []string{bootstrap}
	if runner != "" {
		command = []string{runner, "./" + filepath.Base(bootstrap)}
	}
	cmd := exec.CommandContext(ctx, rie, append([]string{"--runtime-interface-emulator-address", addr, "--runtime-api-address", api}, command...)...)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=30", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_REGION=us-east-1"}, env...)
	f := &Function{Name: name, addr: addr, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = f.out, f.out
	// The function is the emulator's child and shares its output pipe: should it outlive a
	// killed emulator, Wait stops copying after this instead of waiting for it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(f.done) }()
	if err := f.waitListening(ctx); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

// waitListening waits for the emulator to listen on its port (it does right after it starts;
// the function itself starts on the first invoke, as a cold start does). Where the system
// says which process holds a socket (Linux), it waits for the emulator's own listener: a port
// taken by another process before the emulator bound it also accepts connections, and a test
// would talk to whatever holds it — until it goes, and an invoke is refused.
func (f *Function) waitListening(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-f.done:
			return fmt.Errorf("%w: %s:\n%s", errExited, f.Name, f.out.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if owns, known := listensOn(f.cmd.Process.Pid, f.addr); known {
			if owns {
				return nil
			}
		} else if c, err := net.DialTimeout("tcp", f.addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the emulator for %s is not listening on %s", f.Name, f.addr)
}

// listensOn says whether process pid holds a listening TCP socket on addr's port, from /proc;
// known is false where there is no /proc to ask.
func listensOn(pid int, addr string) (owns, known bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false, false
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, false
	}
	want := fmt.Sprintf(":%04X", n)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(line)
		if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" { // 0A: LISTEN
			inodes["socket:["+fields[9]+"]"] = true
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, true
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[link] {
			return true, true
		}
	}
	return false, true
}

// Invoke sends one event and returns the function's response payload.
func (f *Function) Invoke(ctx context.Context, event []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+f.addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(event))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("invoke %s: emulator answered %d: %s\n%s", f.Name, resp.StatusCode, body, f.out.String())
	}
	return body, nil
}

// initReport is the emulator's report of the function's init phase (its cold start).
var initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// InitDuration is the cold-start init time the emulator reported for the first invoke.
func (f *Function) InitDuration(ctx context.Context) (time.Duration, error) {
	out, err := f.WaitLog(ctx, "INIT REPORT")
	if err != nil {
		return 0, err
	}
	m := initReport.FindStringSubmatch(out)
	if m == nil {
		return 0, errors.New("the emulator reported no init duration")
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	return time.Duration(ms * float64(time.Millisecond)), err
}

// Log is everything the emulator and the function printed so far.
func (f *Function) Log() string { return f.out.String() }

// WaitLog waits until a whole line of output contains want and returns the output. The emulator answers an invoke
// before the function's own output has crossed both pipes (the function's to the emulator's,
// the emulator's to ours), so a log read right after the answer can miss the last lines, such
// as the message that explains the refusal the answer reports.
func (f *Function) WaitLog(ctx context.Context, want string) (string, error) {
	for {
		out, changed := f.out.snapshot()
		if strings.Contains(wholeLines(out), want) {
			return out, nil
		}
		select {
		case <-changed:
		case <-f.done: // the process is gone and cmd.Wait has copied all it wrote
			if out = f.out.String(); strings.Contains(wholeLines(out), want) {
				return out, nil
			}
			return out, fmt.Errorf("%s exited without printing %q", f.Name, want)
		case <-ctx.Done():
			return out, fmt.Errorf("%s printed no %q: %w", f.Name, want, ctx.Err())
		}
	}
}

// Stop ends the emulator and the function.
func (f *Function) Stop() {
	if f.cmd.Process != nil {
		_ = f.cmd.Process.Kill()
	}
	<-f.done
}

// LogLines are the function's own JSON log lines, whole ones only.
func (f *Function) LogLines() []string {
	var lines []string
	for _, line := range strings.Split(wholeLines(f.out.String()), "\n") {
		if strings.HasPrefix(line, "{") {
			lines = append(lines, line)
		}
	}
	return lines
}

// wholeLines drops a last line still being written: a pipe can deliver half of one.
func wholeLines(out string) string { return out[:strings.LastIndexByte(out, '\n')+1] }

// freeAddrs are n distinct free loopback addresses. Each listener is held until all are
// chosen: closed one by one, the kernel may hand the same port out twice, and the emulator
// then dies on "address already in use".
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// syncBuffer collects a process's output while tests read it; changed is closed (and
// replaced) on every write, so a reader can wait for output instead of polling.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

// snapshot is the output so far and a channel closed by the next write.
func (b *syncBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.buf.String(), b.changed
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

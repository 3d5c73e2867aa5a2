// Command console renders the web console's views from a seeded local stack — real agents
// running real steps, a fleet, a queue, a drained and a quarantined node — in headless
// Chromium: to PNGs (make screenshots, into shared/console/screenshots), or timed (make
// bench-console: the time to the fleet view's first render at 1,000 and 10,000 nodes and to a
// run's, and the requests each view makes, into localdev/bench/out/console.{md,json}).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
	"mediator/localdev/mediatorbin"
)

var (
	shots = flag.String("screenshots", "", "render every view to a PNG in this folder")
	bench = flag.String("bench", "", "time the views and write console.md and console.json in this folder")
	reps  = flag.Int("reps", 5, "loads of each view the bench times (the median is reported)")
)

func main() {
	flag.Parse()
	if (*shots == "") == (*bench == "") {
		fmt.Fprintln(os.Stderr, "console: give one of -screenshots DIR and -bench DIR")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("the views are seeded by real `mediator agent` processes, which run on Linux only (this is %s)", runtime.GOOS)
	}
	dir, err := os.MkdirTemp("", "mediator-console-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := mediatorbin.Build(ctx, dir)
	if err != nil {
		return err
	}
	// A lease of 9 s: the agents heartbeat every 3 s, so the views change while they are
	// looked at, and a run is picked up within a heartbeat. The bench's simulated nodes
	// heartbeat once, and go offline a lease later: the fleet view draws every node whatever
	// its state.
	if err := os.Setenv("LEASE_TTL_SECONDS", "9"); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := devserver.Open(ctx, devserver.Options{Cluster: "console", Database: "mediator_console", Fresh: true, Log: log,
		S3: &devserver.LocalS3{}})
	defer s.Stop()
	if err != nil {
		return err
	}
	if err := s.Serve(0, gateway.DevTokens(), nil, nil); err != nil {
		return err
	}
	fmt.Printf("Mediator is serving on %s; the console is at %s/console/\n", s.Base, s.Base)
	b, err := startBrowser(ctx)
	if err != nil {
		return err
	}
	defer b.stop()
	agents := &agents{bin: bin, base: s.Base, dir: dir}
	defer agents.stop()
	if *shots != "" {
		return screenshots(ctx, s.Base, agents, b, *shots)
	}
	return measure(ctx, s.Base, agents, b, *bench)
}

// agents are the `mediator agent` processes of the seeded stack.
type agents struct {
	bin, base, dir string
	procs          []*exec.Cmd
}

func (a *agents) start(node string, labels ...string) error {
	work := filepath.Join(a.dir, node)
	args := []string{"agent", "--node-id", node, "--work-dir", work, "--url", a.base, "--token", "dev-node-" + node, "--log-format", "json"}
	for _, l := range labels {
		args = append(args, "--labels", l)
	}
	cmd := exec.Command(a.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEDIATOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the agent of %s: %w", node, err)
	}
	a.procs = append(a.procs, cmd)
	return nil
}

// stop ends each agent and what its steps still run (its process group).
func (a *agents) stop() {
	for _, c := range a.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	}
	a.procs = nil
}

// browser is one headless Chromium, a tab per view.
type browser struct {
	ctx    context.Context
	cancel func()
}

func startBrowser(ctx context.Context) (*browser, error) {
	path := os.Getenv("CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "/Applications/Chromium.app/Contents/MacOS/Chromium"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		return nil, errors.New("chromium is not installed (apt-get install chromium; make prerequisites), or set CHROMIUM")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, acancel := chromedp.NewExecAllocator(context.WithoutCancel(ctx), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		return nil, fmt.Errorf("starting chromium (%s): %w", path, err)
	}
	return &browser{ctx: bctx, cancel: func() { bcancel(); acancel() }}, nil
}

func (b *browser) stop() { b.cancel() }

// tab is a new tab signed in as token at base, and a deadline for what it does.
func (b *browser) tab(base, token string) (context.Context, func(), error) {
	ctx, closeTab := chromedp.NewContext(b.ctx)
	if err := chromedp.Do(ctx); err != nil {
		closeTab()
		return nil, nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	done := func() { cancel(); closeTab() }
	err := chromedp.Do(tctx, chromedp.Navigate(base+"/console/config.json"),
		void(chromedp.Evaluate[any](`sessionStorage.setItem('mediator.token', `+strconv.Quote(token)+`)`)))
	if err != nil {
		done()
		return nil, nil, err
	}
	return tctx, done, nil
}

// rendered waits for the view's first render, and answers when it came: performance.now()
// at the app's mark, in milliseconds from the navigation's start.
func rendered(ctx context.Context, view string) (float64, error) {
	// By selector, which outlives a navigation's new execution context (a poll does not).
	if err := chromedp.Do(ctx, chromedp.WaitReady(`body[data-rendered=`+view+`]`, chromedp.RetryInterval(10*time.Millisecond))); err != nil {
		return 0, fmt.Errorf("the %s view never rendered: %w", view, err)
	}
	return chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.getEntriesByName('console:rendered:'+`+strconv.Quote(view)+`)[0].startTime`))
}

func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// requests counts what a tab asks for, by kind: the API (/v1/...), the console's own files,
// and anything else (the log bucket's chunks).
type requests struct {
	mu     sync.Mutex
	api    int
	files  int
	others int
}

func (r *requests) watch(ctx context.Context, base string) {
	events := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			u := ev.Request.URL
			r.mu.Lock()
			switch {
			case strings.HasPrefix(u, base+"/v1/"):
				r.api++
			case strings.HasPrefix(u, base+"/console"):
				r.files++
			case strings.HasPrefix(u, "http"):
				r.others++
			}
			r.mu.Unlock()
		}
	}()
}

func (r *requests) take() (api, files, others int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	api, files, others = r.api, r.files, r.others
	r.api, r.files, r.others = 0, 0, 0
	return
}

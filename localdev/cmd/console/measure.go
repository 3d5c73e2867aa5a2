package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"time"

	"github.com/chromedp/chromedp"

	"mediator/shared/client"
)

// sample is one view's figures: the median of the loads' times to the first render, and the
// requests one load made up to it.
type sample struct {
	View       string    `json:"view"`
	Nodes      int       `json:"nodes"`
	Loads      int       `json:"loads"`
	MedianMS   float64   `json:"first_render_median_ms"`
	TimesMS    []float64 `json:"first_render_ms"`
	APICalls   int       `json:"api_calls_to_first_render"`
	Files      int       `json:"console_files"`
	Others     int       `json:"other_requests"`
	Note       string    `json:"note,omitempty"`
	AfterMS    float64   `json:"log_complete_median_ms,omitempty"`
	AfterCalls int       `json:"api_calls_to_log_complete,omitempty"`
	LogGets    int       `json:"log_chunk_gets_to_log_complete,omitempty"`
}

// time loads path reps times in a fresh tab each and reports view's first render; with
// after, also the time until after holds, and the requests until then.
func timeView(ctx context.Context, b *browser, base, path, view, after string, nodes int) (sample, error) {
	s := sample{View: view, Nodes: nodes, Loads: *reps}
	var afters []float64
	for i := 0; i < *reps; i++ {
		tab, done, err := b.tab(base, "dev-admin")
		if err != nil {
			return s, err
		}
		var seen requests
		seen.watch(tab, base)
		_ = chromedp.Do(tab, chromedp.Navigate("about:blank"))
		seen.take()
		if err := chromedp.Do(tab, chromedp.Navigate(base+path)); err != nil {
			done()
			return s, err
		}
		ms, err := rendered(tab, view)
		if err != nil {
			done()
			return s, err
		}
		s.TimesMS = append(s.TimesMS, ms)
		s.APICalls, s.Files, s.Others = seen.take()
		if after != "" {
			if _, err := chromedp.Run(tab, chromedp.Poll[bool](after, chromedp.WithPollingInterval(10*time.Millisecond))); err != nil {
				done()
				return s, err
			}
			at, err := chromedp.Run(tab, chromedp.Evaluate[float64](`performance.now()`))
			if err != nil {
				done()
				return s, err
			}
			afters = append(afters, at)
			api, _, others := seen.take()
			s.AfterCalls, s.LogGets = s.APICalls+api, s.Others+others
		}
		done()
	}
	s.MedianMS = median(s.TimesMS)
	if len(afters) > 0 {
		s.AfterMS = median(afters)
	}
	return s, nil
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if len(ys) == 0 {
		return 0
	}
	return ys[len(ys)/2]
}

// measure times the fleet view at 1,000 and 10,000 nodes registered through the API, and a
// run's page with a finished run of three steps whose logs it reads.
func measure(ctx context.Context, base string, a *agents, b *browser, dir string) error {
	began := time.Now()
	var out []sample
	alice, err := api(base, "dev-client-alice")
	if err != nil {
		return err
	}
	admin, _ := api(base, "dev-admin")
	if err := a.start("bench-agent", "board=rpi4"); err != nil {
		return err
	}
	if err := live(ctx, admin, 1); err != nil {
		return err
	}
	if _, err := alice.Submit(ctx, client.RunRequest{RunID: "logs-3", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{
		{ID: "one", Spec: cmd(`seq 1 2000`)},
		{ID: "two", After: []string{"one"}, Spec: cmd(`seq 1 2000`)},
		{ID: "three", After: []string{"two"}, Spec: cmd(`seq 1 2000`)},
	}}); err != nil {
		return err
	}
	if err := settled(ctx, alice, "logs-3", "SUCCEEDED"); err != nil {
		return err
	}
	logsShown := `document.querySelectorAll('.step-log').length === 3 && [...document.querySelectorAll('.step-log h3 span.muted')].every((s) => s.textContent.includes('complete'))`
	s, err := timeView(ctx, b, base, "/console/runs/logs-3?owner=client:alice", "run", logsShown, 1)
	if err != nil {
		return err
	}
	s.Note = "a finished run of 3 steps, 2,000 log lines each"
	out = append(out, s)
	registered := 1
	for _, n := range []int{1000, 10000} {
		t0 := time.Now()
		if err := register(ctx, base, registered, n); err != nil {
			return err
		}
		fmt.Printf("registered %d nodes through PUT /v1/nodes/{id} in %s\n", n-registered, time.Since(t0).Round(time.Millisecond))
		registered = n
		s, err := timeView(ctx, b, base, "/console/", "fleet", "", n)
		if err != nil {
			return err
		}
		s.Note = "100 rows a page"
		out = append(out, s)
		for _, v := range []struct{ path, name string }{{"/console/queue", "queue"}, {"/console/runs", "runs"}, {"/console/nodes/node-00007", "node"}} {
			s, err := timeView(ctx, b, base, v.path, v.name, "", n)
			if err != nil {
				return err
			}
			out = append(out, s)
		}
	}
	return write(dir, out, time.Since(began))
}

func write(dir string, out []sample, took time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(map[string]any{"samples": out, "took_seconds": took.Seconds()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "console.json"), j, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# The console in headless Chromium\n\n")
	fmt.Fprintf(&md, "Each view loaded %d times, a fresh tab each, against a local stack (`make bench-console`); "+
		"the time is performance.now() at the mark the app sets at the view's first render (from the navigation's start); "+
		"requests are counted from the browser's network events until the bench saw that render (within about 10 ms of it: a request begun just after may be in). "+
		"The simulated nodes heartbeat once, through PUT /v1/nodes/{id}, and are offline a lease later: the fleet view draws each whatever its state.\n\n", *reps)
	md.WriteString("| view | nodes | first render, median (ms) | loads (ms) | API calls | console files | other requests | note |\n|---|---:|---:|---|---:|---:|---:|---|\n")
	for _, s := range out {
		times := make([]string, len(s.TimesMS))
		for i, t := range s.TimesMS {
			times[i] = fmt.Sprintf("%.0f", t)
		}
		note := s.Note
		if s.AfterMS > 0 {
			note += fmt.Sprintf("; every log shown at %.0f ms, after %d API calls and %d chunk GETs", s.AfterMS, s.AfterCalls, s.LogGets)
		}
		fmt.Fprintf(&md, "| %s | %d | %.0f | %s | %d | %d | %d | %s |\n", s.View, s.Nodes, s.MedianMS, strings.Join(times, ", "), s.APICalls, s.Files, s.Others, note)
	}
	fmt.Fprintf(&md, "\n%d loads in %s.\n", len(out)**reps, took.Round(time.Second))
	if err := os.WriteFile(filepath.Join(dir, "console.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(md.String())
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mediator/shared/client"
)

func ptr[T any](v T) *T { return &v }

// A node's health in words and in a table's cells: its reason and who quarantined it shown,
// what a terminal would act on escaped.
func TestNodeHealthIsShownVisible(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	n := client.NodeInfo{NodeID: "rpi-7", Health: client.HealthQuarantined, HealthReason: ptr("hub \x1b[2Jgone\nsecond line"),
		HealthSince: now.Add(-3 * time.Minute), InfraFailures: 3, QuarantinedBy: ptr("system"), HealthCheckDue: true}
	if got, want := healthLine(n, now), `quarantined since 3m ago by system: hub \x1b[2Jgone\nsecond line · 3 infra failure(s) in a row`; got != want {
		t.Errorf("healthLine: %q\nwant        %q", got, want)
	}
	if got, want := visible(whyCell(n)), `hub \x1b[2Jgone… · by system · check due`; got != want {
		t.Errorf("whyCell: %q, want %q", got, want)
	}
	if got := healthOf(client.NodeInfo{}); got != client.HealthHealthy {
		t.Errorf("a node the API shows no health of: %q", got)
	}
	for want, n := range map[string]client.NodeInfo{
		"admin:ops": {Draining: true, DrainRequestedBy: ptr("admin:ops")},
		"agent":     {Draining: true},
		"":          {},
	} {
		if got := drainCell(n); got != want {
			t.Errorf("drainCell(%+v) = %q, want %q", n, got, want)
		}
	}
}

// The run list has a KIND column only when a run in it is not a plain one.
func TestRunsShowTheirKindWhenNotARun(t *testing.T) {
	t.Parallel()
	now := time.Now()
	list := func(runs ...client.Run) string {
		var out bytes.Buffer
		a := &app{environment: environment{stdout: &out, getenv: func(string) string { return "" }, now: func() time.Time { return now }}}
		a.printRuns([]*client.RunPage{{Runs: runs}})
		return out.String()
	}
	plain := client.Run{RunID: "a", Kind: client.KindRun, State: "SUCCEEDED", CreatedAt: now}
	check := client.Run{RunID: "hc-1", Kind: client.KindHealthCheck, State: "RUNNING", CreatedAt: now}
	if got := list(plain); strings.Contains(got, "KIND") {
		t.Errorf("plain runs only:\n%s", got)
	}
	got := list(plain, check)
	lines := strings.Split(got, "\n")
	if !strings.HasPrefix(lines[0], "RUN ID  KIND") || !strings.Contains(lines[1], "-") || !strings.Contains(lines[2], "health_check") {
		t.Errorf("with a health check:\n%s", got)
	}
}

// A health check file is YAML or JSON; JSON goes as written.
func TestLoadObject(t *testing.T) {
	t.Parallel()
	js := `{"needs":["a"],  "every_seconds": 60, "steps":[{"id":"s"}]}`
	if got, err := loadObject([]byte(js)); err != nil || string(got) != js {
		t.Fatalf("JSON: %s %v", got, err)
	}
	got, err := loadObject([]byte("needs: [board=rpi4]\nevery_seconds: 3600\nsteps:\n  - {id: usb, spec: {cmd: lsusb}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var v client.HealthCheckRequest
	if err := json.Unmarshal(got, &v); err != nil || v.EverySeconds != 3600 || len(v.Steps) != 1 || v.Steps[0].ID != "usb" || v.Needs[0] != "board=rpi4" {
		t.Fatalf("YAML: %s %v", got, err)
	}
	for _, bad := range []string{"", "[1, 2]", "a: [", "a: 1\n---\nb: 2\n"} {
		if _, err := loadObject([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

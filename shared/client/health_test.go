package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// sent is one request as a test server received it.
type sent struct {
	method, path string
	body         map[string]any
}

// recorder answers every request with answer and keeps what was sent.
func recorder(t *testing.T, answer string) (*Client, *[]sent) {
	t.Helper()
	var got []sent
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := sent{method: r.Method, path: r.URL.EscapedPath()}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			if err := json.Unmarshal(b, &s.body); err != nil {
				t.Errorf("%s %s: the body is not a JSON object: %q", r.Method, r.URL, b)
			}
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, srv.URL)
	return c, &got
}

// The node-health calls go to their routes with their bodies, the node's id escaped as one
// segment; a node's health fields are read from the answer.
func TestTheHealthCallsSendTheirRoutesAndBodies(t *testing.T) {
	t.Parallel()
	node := `{"node":{"node_id":"rpi/7","state":"idle","health":"quarantined","health_reason":"no usb hub",` +
		`"infra_failures":3,"quarantined_by":"admin:ops","health_check_due":true,"health_since":"2026-12-01T10:00:00Z"},` +
		`"history":[{"at":"2026-12-01T10:00:00Z","kind":"health","from":"suspect","to":"quarantined","reason":"no usb hub","run_id":null}]}`
	c, got := recorder(t, node)
	ctx := context.Background()
	q, err := c.Quarantine(ctx, "rpi/7", "no usb hub")
	if err != nil {
		t.Fatal(err)
	}
	n := q.Node
	if n.Health != HealthQuarantined || deref(n.HealthReason) != "no usb hub" || n.InfraFailures != 3 ||
		deref(n.QuarantinedBy) != "admin:ops" || !n.HealthCheckDue || n.HealthSince.IsZero() {
		t.Fatalf("the node as decoded: %+v", n)
	}
	if _, err := c.Unquarantine(ctx, "rpi/7"); err != nil {
		t.Fatal(err)
	}
	d, err := c.GetNode(ctx, "rpi/7")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.History) != 1 || d.History[0].Kind != "health" || deref(d.History[0].To) != HealthQuarantined || d.History[0].RunID != nil {
		t.Fatalf("the history as decoded: %+v", d.History)
	}
	check := HealthCheckRequest{Needs: []string{"board=rpi4"}, Steps: []StepRequest{{ID: "usb", Spec: map[string]any{"cmd": "lsusb"}}}}
	for _, call := range []func() error{
		func() error { _, err := c.PutHealthCheck(ctx, "usb", check); return err },
		func() error { _, err := c.GetHealthCheck(ctx, "usb"); return err },
		func() error { _, err := c.ListHealthChecks(ctx); return err },
		func() error { _, err := c.DeleteHealthCheck(ctx, "usb"); return err },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	want := []struct{ method, path string }{
		{"POST", "/v1/nodes/rpi%2F7/quarantine"}, {"DELETE", "/v1/nodes/rpi%2F7/quarantine"}, {"GET", "/v1/nodes/rpi%2F7"},
		{"PUT", "/v1/health-checks/usb"}, {"GET", "/v1/health-checks/usb"}, {"GET", "/v1/health-checks"}, {"DELETE", "/v1/health-checks/usb"},
	}
	if len(*got) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(*got), len(want), *got)
	}
	for i, w := range want {
		if g := (*got)[i]; g.method != w.method || g.path != w.path {
			t.Errorf("request %d: %s %s, want %s %s", i, g.method, g.path, w.method, w.path)
		}
	}
	if b := (*got)[0].body; len(b) != 1 || b["reason"] != "no usb hub" {
		t.Errorf("the quarantine's body: %v", b)
	}
	if b := (*got)[3].body; b["every_seconds"] != nil || len(b["needs"].([]any)) != 1 || len(b["steps"].([]any)) != 1 {
		t.Errorf("the health check's body: %v", b)
	}
}

// A failure's kind and a node's own unhealthy reason go only when there is one: a report or a
// heartbeat without them reads as before (a test failure; a healthy node).
func TestFailureAndUnhealthyAreLeftOutWhenUnset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v     any
		field string
		sent  bool
	}{
		{ReportRequest{Status: "failed"}, "failure", false},
		{ReportRequest{Status: "failed", Failure: FailureInfra}, "failure", true},
		{HeartbeatRequest{BootID: "b"}, "unhealthy", false},
		{HeartbeatRequest{BootID: "b", Unhealthy: "disk full"}, "unhealthy", true},
	} {
		var m map[string]any
		if err := json.Unmarshal(must(json.Marshal(tc.v)), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m[tc.field]; ok != tc.sent {
			t.Errorf("%+v: %s sent %v, want %v", tc.v, tc.field, ok, tc.sent)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

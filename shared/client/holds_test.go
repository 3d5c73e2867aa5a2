package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// A hold is sent with hold_seconds and without steps; a run, as before, without hold_seconds.
func TestAHoldIsSentWithoutSteps(t *testing.T) {
	t.Parallel()
	hours := 3600
	var hold map[string]any
	if err := json.Unmarshal(must(json.Marshal(RunRequest{RunID: "h", Needs: []string{"node_id=rpi-1"}, HoldSeconds: &hours})), &hold); err != nil {
		t.Fatal(err)
	}
	if _, ok := hold["steps"]; ok || hold["hold_seconds"] != 3600.0 {
		t.Errorf("a hold as sent: %v", hold)
	}
	var run map[string]any
	if err := json.Unmarshal(must(json.Marshal(RunRequest{RunID: "r", Steps: []StepRequest{{ID: "s"}}})), &run); err != nil {
		t.Fatal(err)
	}
	if _, ok := run["hold_seconds"]; ok || run["steps"] == nil {
		t.Errorf("a run as sent: %v", run)
	}
}

// Release and Extend go to their routes, the run's id escaped and the owner sent for an admin;
// Extend's body is the seconds. The hold's fields are read from the answer.
func TestReleaseAndExtendSendTheirRoutesAndBodies(t *testing.T) {
	t.Parallel()
	c, got := recorder(t, `{"run":{"run_id":"h/1","kind":"hold","state":"RUNNING","hold_seconds":5400,`+
		`"hold_ends_at":"2026-12-01T13:30:00Z","assigned":{"main":"rpi-1"}}}`)
	ctx := context.Background()
	e, err := c.Extend(ctx, "h/1", 1800)
	if err != nil {
		t.Fatal(err)
	}
	r := e.Run
	if !r.Hold() || r.HoldSeconds == nil || *r.HoldSeconds != 5400 || r.HoldEndsAt == nil ||
		!r.HoldEndsAt.Equal(time.Date(2026, 12, 1, 13, 30, 0, 0, time.UTC)) {
		t.Fatalf("the hold as decoded: %+v", r)
	}
	if _, err := c.Release(ctx, "h/1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"/v1/runs/h%2F1/extend", "/v1/runs/h%2F1/release"}
	if len(*got) != 2 {
		t.Fatalf("%d requests: %+v", len(*got), *got)
	}
	for i, g := range *got {
		if g.method != "POST" || g.path != want[i] {
			t.Errorf("request %d: %s %s, want POST %s", i, g.method, g.path, want[i])
		}
	}
	if b := (*got)[0].body; len(b) != 1 || b["seconds"] != 1800.0 {
		t.Errorf("extend's body: %v", b)
	}
	if b := (*got)[1].body; b != nil {
		t.Errorf("release's body: %v, want none", b)
	}
}

// An admin's Release names the owner, and a list of holds asks for kind=hold; a run that is
// not a hold decodes with no hold fields.
func TestHoldsQueryTheirOwnerAndKind(t *testing.T) {
	t.Parallel()
	var queries []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Query())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"runs":[{"run_id":"r","kind":"run","state":"QUEUED"}],"next":null,"run":{"run_id":"r","kind":"hold","state":"CANCELLED","hold_seconds":60,"hold_ends_at":null}}`))
	}))
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, srv.URL)
	ctx := context.Background()
	rel, err := c.ForOwner("client:alice").Release(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Run.HoldEndsAt != nil || rel.Run.HoldSeconds == nil {
		t.Errorf("a hold released while queued: %+v", rel.Run)
	}
	page, err := c.ListRuns(ctx, ListRunsParams{Kind: KindHold, State: "QUEUED"})
	if err != nil {
		t.Fatal(err)
	}
	if r := page.Runs[0]; r.Hold() || r.HoldSeconds != nil || r.HoldEndsAt != nil {
		t.Errorf("a run that is not a hold: %+v", r)
	}
	if len(queries) != 2 || queries[0].Get("owner") != "client:alice" || queries[1].Get("kind") != "hold" || queries[1].Get("state") != "QUEUED" {
		t.Errorf("the queries sent: %v", queries)
	}
}

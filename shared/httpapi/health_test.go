package httpapi_test

import (
	"slices"
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// beatUnhealthy heartbeats node as itself, its own checks failing for reason ("" passing).
func beatUnhealthy(env *apitest.Env, node, boot, reason string, labels ...string) apitest.Beat {
	env.T.Helper()
	body := map[string]any{"boot_id": boot, "labels": append([]string{}, labels...)}
	if reason != "" {
		body["unhealthy"] = reason
	}
	resp := env.Do(apitest.Node(node), "PUT", "/v1/nodes/"+node, body)
	if resp.Status != 200 {
		env.T.Fatalf("heartbeat of %s: %s", node, resp)
	}
	var b apitest.Beat
	resp.Decode(env.T, &b)
	return b
}

func nodeAnswer(env *apitest.Env, resp apitest.Response) store.Node {
	env.T.Helper()
	if resp.Status != 200 {
		env.T.Fatalf("%s", resp)
	}
	var a struct {
		Node store.Node `json:"node"`
	}
	resp.Decode(env.T, &a)
	return a.Node
}

// A node whose own checks fail quarantines itself: born so, it never gets a lease, and a run
// only it could serve queues (202, not 422). Its checks passing again, it lifts its own
// quarantine, and the queued run is placed on it within that heartbeat.
func TestANodeQuarantinesItselfAndLiftsItByItself(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	b := beatUnhealthy(env, "A", "b1", "disk full: 12 MiB free under /work", "board")
	if b.Node.Health != wire.HealthQuarantined || b.Node.QuarantinedBy == nil || *b.Node.QuarantinedBy != wire.QuarantinedBySelf ||
		b.Node.HealthReason == nil || *b.Node.HealthReason != "disk full: 12 MiB free under /work" {
		t.Fatalf("a node born unhealthy: %+v", b.Node)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board")); resp.Status != 202 {
		t.Fatalf("a run only a quarantined node serves: %s, want 202", resp)
	}
	if b := beatUnhealthy(env, "A", "b1", "disk full: 8 MiB free under /work", "board"); b.Lease != nil ||
		*b.Node.HealthReason != "disk full: 8 MiB free under /work" {
		t.Fatalf("still unhealthy: %+v, lease %+v", b.Node, b.Lease)
	}
	b = beatUnhealthy(env, "A", "b1", "", "board")
	if b.Node.Health != wire.HealthHealthy || b.Node.QuarantinedBy != nil {
		t.Fatalf("its checks passing again: %+v", b.Node)
	}
	if env.State("r") != wire.Running {
		t.Fatalf("lifting its own quarantine did not wake the queue: r is %s", env.State("r"))
	}
	env.CheckInvariants()
}

// An admin's quarantine only an admin lifts: the node's own say neither lifts nor replaces it.
// Lifting it makes the node healthy, its count reset, wakes the queue, and the node's history
// shows each change newest first with its leases.
func TestAnAdminsQuarantineOnlyAnAdminLifts(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	beatUnhealthy(env, "A", "b1", "", "board")
	env.Exec(`UPDATE nodes SET health = 'suspect', infra_failures = 1, health_reason = 'x' WHERE node_id = 'A'`)
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("first", "board")); resp.Status != 201 {
		t.Fatalf("first: %s", resp)
	}
	env.Finish("A", "b1", "first", wire.ReportSucceeded)
	n := nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "the USB hub is being replaced"}))
	if n.Health != wire.HealthQuarantined || *n.QuarantinedBy != "admin:ops" || *n.HealthReason != "the USB hub is being replaced" {
		t.Fatalf("quarantined by an admin: %+v", n)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board")); resp.Status != 202 {
		t.Fatalf("a run only the quarantined node serves: %s", resp)
	}
	// The node's own checks fail, then pass: the admin's quarantine stays as it was.
	beatUnhealthy(env, "A", "b1", "disk", "board")
	b := beatUnhealthy(env, "A", "b1", "", "board")
	if b.Node.Health != wire.HealthQuarantined || *b.Node.QuarantinedBy != "admin:ops" || *b.Node.HealthReason != "the USB hub is being replaced" {
		t.Fatalf("the node's own say changed an admin's quarantine: %+v", b.Node)
	}
	// A second admin's quarantine keeps the first.
	n = nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", nil))
	if *n.HealthReason != "the USB hub is being replaced" {
		t.Fatalf("a second quarantine: %+v", n)
	}
	n = nodeAnswer(env, env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/quarantine", nil))
	if n.Health != wire.HealthHealthy || n.InfraFailures != 0 || n.QuarantinedBy != nil || n.HealthReason != nil {
		t.Fatalf("lifted: %+v", n)
	}
	if env.State("r") != wire.Running {
		t.Fatalf("lifting the quarantine did not wake the queue: r is %s", env.State("r"))
	}
	resp := env.Do(apitest.Admin, "GET", "/v1/nodes/A", nil)
	if resp.Status != 200 {
		t.Fatal(resp)
	}
	var d store.NodeDetail
	resp.Decode(t, &d)
	var lines []string
	for _, e := range d.History {
		line := e.Kind + ":" + e.To
		if e.RunID != nil {
			line += "@" + *e.RunID
		}
		lines = append(lines, line)
	}
	want := "lease:leased@r health:healthy health:quarantined health:healthy lease:released@first lease:leased@first"
	if got := strings.Join(lines, " "); got != want || d.Node.NodeID != "A" {
		t.Fatalf("history, newest first:\n got %s\nwant %s", got, want)
	}
	env.CheckInvariants()
}

// A quarantined node keeps the lease it holds and finishes it; it takes no
// other.
func TestAQuarantinedNodeFinishesWhatItHolds(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	beatUnhealthy(env, "A", "b1", "", "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("held", "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "flaky"}))
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("next", "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	env.Finish("A", "b1", "held", wire.ReportSucceeded)
	if env.State("held") != wire.Succeeded || env.State("next") != wire.Queued {
		t.Fatalf("held %s, next %s", env.State("held"), env.State("next"))
	}
	if h := nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", nil)); h.Health != wire.HealthQuarantined {
		t.Fatalf("a success lifted a quarantine: %+v", h)
	}
}

// Every node carries node_id=<its id>, which the server adds: a role needing it is pinned to
// that node, and no advert may say it.
func TestARoleNeedingANodesIDIsPinnedToIt(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	_, b := env.Beat("B", "b1", false, "board")
	if !slices.Contains(b.Node.Labels, "node_id=B") {
		t.Fatalf("B's labels: %v", b.Node.Labels)
	}
	for _, id := range []string{"pin-b", "pin-b2"} {
		if resp := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": id, "needs": []string{"board", "node_id=B"},
			"steps": []map[string]any{{"id": "s1"}}}); resp.Status/100 != 2 {
			t.Fatal(resp)
		}
	}
	if env.Count(`SELECT count(*) FROM leases WHERE run_id = 'pin-b' AND node_id = 'B'`) != 1 || env.State("pin-b2") != wire.Queued {
		t.Fatalf("pinned runs: pin-b on B? pin-b2 %s (A stays free)", env.State("pin-b2"))
	}
	resp := env.Do(apitest.Node("A"), "PUT", "/v1/nodes/A", map[string]any{"boot_id": "b1", "labels": []string{"board", "node_id=B"}})
	if resp.Status != 400 || !strings.Contains(string(resp.Body), `"labels[1]"`) {
		t.Fatalf("an advert saying node_id: %s", resp)
	}
}

// Health checks are an admin's to register, read, replace and remove.
func TestHealthChecksAreRegisteredReadAndRemoved(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	check := map[string]any{"needs": []string{"board=rpi4"}, "steps": []map[string]any{
		{"id": "usb", "spec": map[string]any{"cmd": "lsusb"}}, {"id": "disk", "after": []string{"usb"}}}, "every_seconds": 3600}
	if resp := env.Do(apitest.Admin, "PUT", "/v1/health-checks/usb", check); resp.Status != 201 {
		t.Fatalf("register: %s", resp)
	}
	check["every_seconds"] = nil
	resp := env.Do(apitest.Admin, "PUT", "/v1/health-checks/usb", check)
	if resp.Status != 200 {
		t.Fatalf("replace: %s", resp)
	}
	var a struct {
		HealthCheck store.HealthCheck `json:"health_check"`
	}
	resp.Decode(t, &a)
	if c := a.HealthCheck; c.Name != "usb" || c.EverySeconds != nil || len(c.Steps) != 2 || c.Steps[1].Role != wire.HealthCheckRole ||
		c.Steps[1].After[0] != "usb" || !slices.Equal(c.Needs, []string{"board=rpi4"}) {
		t.Fatalf("as replaced: %+v", c)
	}
	if resp := env.Do(apitest.Admin, "GET", "/v1/health-checks", nil); resp.Status != 200 || !strings.Contains(string(resp.Body), `"name":"usb"`) {
		t.Fatalf("list: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "DELETE", "/v1/health-checks/usb", nil); resp.Status != 200 {
		t.Fatalf("delete: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "GET", "/v1/health-checks/usb", nil); resp.Status != 404 {
		t.Fatalf("after the delete: %s", resp)
	}
	if resp := env.Do(alice, "PUT", "/v1/health-checks/mine", check); resp.Status != 403 {
		t.Fatalf("a client registering a check: %s", resp)
	}
}

// A spec's infra_exit_codes, well formed, are the node's to read: the run is stored with them.
func TestASpecsInfraExitCodesAreAccepted(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	resp := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "r", "needs": []string{"board"},
		"steps": []map[string]any{{"id": "s", "spec": map[string]any{"cmd": "flash.sh", "infra_exit_codes": []int{75, 127}}}}})
	if resp.Status != 201 {
		t.Fatal(resp)
	}
	if _, b := env.Beat("A", "b1", false, "board"); len(b.Steps) != 1 || !strings.Contains(string(b.Steps[0].Spec), `"infra_exit_codes":[75,127]`) {
		t.Fatalf("the node's step: %+v", b.Steps)
	}
}

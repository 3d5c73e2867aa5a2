package httpapi_test

import (
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// registerCheck registers a health check of one step for the nodes with needs.
func registerCheck(env *apitest.Env, name string, every *int, needs ...string) {
	env.T.Helper()
	check := map[string]any{"needs": needs, "steps": []map[string]any{{"id": "probe", "spec": map[string]any{"cmd": "lsusb"}}}}
	if every != nil {
		check["every_seconds"] = *every
	}
	if resp := env.Do(apitest.Admin, "PUT", "/v1/health-checks/"+name, check); resp.Status != 201 {
		env.T.Fatalf("register %s: %s", name, resp)
	}
}

// dueCheck is the health check run due on node ("" for none), as the node's row names it.
func dueCheck(env *apitest.Env, node string) string {
	env.T.Helper()
	var id *string
	if err := env.Store.Pool().QueryRow(env.T.Context(), `SELECT check_run_id FROM nodes WHERE node_id = $1`, node).Scan(&id); err != nil {
		env.T.Fatal(err)
	}
	if id == nil {
		return ""
	}
	return *id
}

// quarantineAndLift has an admin quarantine node and lift it again, which schedules the check
// that applies to it; it answers the node as lifted and the check due on it.
func quarantineAndLift(env *apitest.Env, node string) (store.Node, string) {
	env.T.Helper()
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/"+node+"/quarantine", map[string]any{"reason": "the hub was swapped"}))
	n := nodeAnswer(env, env.Do(apitest.Admin, "DELETE", "/v1/nodes/"+node+"/quarantine", nil))
	return n, dueCheck(env, node)
}

// nodeView is a node as an admin reads it.
func nodeView(env *apitest.Env, node string) store.Node {
	env.T.Helper()
	resp := env.Do(apitest.Admin, "GET", "/v1/nodes/"+node, nil)
	if resp.Status != 200 {
		env.T.Fatal(resp)
	}
	var d store.NodeDetail
	resp.Decode(env.T, &d)
	return d.Node
}

// failAsInfra runs the runnable steps of run the node holds and reports each failed with
// failure infra.
func failAsInfra(env *apitest.Env, node, boot, run string, labels ...string) {
	env.T.Helper()
	_, b := env.Beat(node, boot, false, labels...)
	for _, st := range b.Steps {
		if st.RunID != run || !st.Runnable {
			continue
		}
		if r := env.Report(node, boot, b.Lease.Epoch, run, st.StepID, wire.ReportStarted); r.Status != 200 {
			env.T.Fatal(r)
		}
		r := env.Do(apitest.Node(node), "POST", "/v1/runs/"+run+"/steps/"+st.StepID+"/result", map[string]any{
			"node_id": node, "boot_id": boot, "epoch": b.Lease.Epoch, "status": wire.ReportFailed, "exit_code": 75,
			"failure": wire.FailureInfra, "message": "the serial port vanished"})
		if r.Status != 200 {
			env.T.Fatal(r)
		}
	}
}

// leasedTo is the run that holds node's lease ("" for none).
func leasedTo(env *apitest.Env, node string) string {
	env.T.Helper()
	var run string
	_ = env.Store.Pool().QueryRow(env.T.Context(), `SELECT run_id FROM leases WHERE node_id = $1`, node).Scan(&run)
	return run
}

// An admin lifting a quarantine on a node a check applies to makes it suspect and places the
// check there before the run that queued for it; the check passing makes the node healthy and
// the queued run is placed next. The check is the system's, of kind health_check, shown to an
// admin and to no client.
func TestLiftingAQuarantinePlacesTheCheckBeforeTheQueuedRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "hub swapped"}))
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board")); resp.Status != 202 {
		t.Fatalf("a run only a quarantined node serves: %s", resp)
	}
	n := nodeAnswer(env, env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/quarantine", nil))
	check := dueCheck(env, "A")
	if n.Health != wire.HealthSuspect || !n.HealthCheckDue || check == "" || !strings.Contains(*n.HealthReason, "a health check decides") {
		t.Fatalf("lifted with a check registered: %+v, check %q", n, check)
	}
	if got := leasedTo(env, "A"); got != check || env.State("r") != wire.Queued {
		t.Fatalf("A leased to %q, r %s: the check %s goes first", got, env.State("r"), check)
	}
	resp := env.Do(apitest.Admin, "GET", "/v1/runs/"+check, nil)
	var a struct{ Run store.Run }
	resp.Decode(t, &a)
	if run := a.Run; resp.Status != 200 || run.Kind != wire.KindHealthCheck || run.Owner != wire.SystemOwner || run.State != wire.Running ||
		run.Roles[wire.HealthCheckRole].NodeID != "A" {
		t.Fatalf("the check as an admin sees it: %s", resp)
	}
	if resp := env.Do(alice, "GET", "/v1/runs/"+check, nil); resp.Status != 404 {
		t.Fatalf("a client reading the system's check: %s", resp)
	}
	env.Finish("A", "b1", check, wire.ReportSucceeded)
	if n := nodeView(env, "A"); n.Health != wire.HealthHealthy || n.HealthCheckDue || n.InfraFailures != 0 {
		t.Fatalf("after the check passed: %+v", n)
	}
	if env.State(check) != wire.Succeeded || leasedTo(env, "A") != "r" {
		t.Fatalf("check %s, A leased to %q: the queued run goes next", env.State(check), leasedTo(env, "A"))
	}
	env.CheckInvariants()
}

// A check that fails quarantines its node with the check's failure as the reason; the run
// queued for the node stays queued.
func TestAFailingCheckQuarantinesTheNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "hub swapped"}))
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	nodeAnswer(env, env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/quarantine", nil))
	check := dueCheck(env, "A")
	env.Finish("A", "b1", check, wire.ReportFailed)
	n := nodeView(env, "A")
	if n.Health != wire.HealthQuarantined || n.QuarantinedBy == nil || *n.QuarantinedBy != wire.QuarantinedBySystem || n.HealthCheckDue ||
		n.HealthReason == nil || !strings.HasPrefix(*n.HealthReason, "health check usb failed: probe") {
		t.Fatalf("after the check failed: %+v", n)
	}
	if env.State("r") != wire.Queued || leasedTo(env, "A") != "" {
		t.Fatalf("r %s, A leased to %q", env.State("r"), leasedTo(env, "A"))
	}
	env.CheckInvariants()
}

// An infrastructure failure makes the node suspect and, a check applying, puts the check on
// it before the run that queued behind the failing one; the check passing, that run is next.
// A suspect node with no check that applies goes on taking work.
func TestAnInfraFailureRunsTheCheckBeforeAnythingElse(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	env.Beat("G", "b1", false, "gpu")
	for _, r := range []map[string]any{oneNodeRun("first", "board"), oneNodeRun("second", "board"), oneNodeRun("g1", "gpu"), oneNodeRun("g2", "gpu")} {
		if resp := env.Do(alice, "POST", "/v1/runs", r); resp.Status/100 != 2 {
			t.Fatal(resp)
		}
	}
	failAsInfra(env, "A", "b1", "first", "board")
	check := dueCheck(env, "A")
	if n := nodeView(env, "A"); n.Health != wire.HealthSuspect || !n.HealthCheckDue || check == "" {
		t.Fatalf("after an infra failure: %+v", n)
	}
	if got := leasedTo(env, "A"); got != check || env.State("second") != wire.Queued {
		t.Fatalf("A leased to %q, second %s: the check %s goes first", got, env.State("second"), check)
	}
	env.Finish("A", "b1", check, wire.ReportSucceeded)
	if leasedTo(env, "A") != "second" || nodeView(env, "A").Health != wire.HealthHealthy {
		t.Fatalf("after the check passed: A leased to %q", leasedTo(env, "A"))
	}
	// No check applies to G: suspect, it takes the next run.
	failAsInfra(env, "G", "b1", "g1", "gpu")
	if n := nodeView(env, "G"); n.Health != wire.HealthSuspect || n.HealthCheckDue || leasedTo(env, "G") != "g2" {
		t.Fatalf("G suspect with no check: %+v, leased to %q", n, leasedTo(env, "G"))
	}
	env.CheckInvariants()
}

// A periodic check is scheduled by the reaper on each node it applies to that was never
// checked or was checked longer than every_seconds ago, once: not again while it is due or
// within the period.
func TestAPeriodicCheckRunsEveryPeriod(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	hour := 3600
	registerCheck(env, "disk", &hour, "board")
	env.Beat("A", "b1", false, "board")
	env.Beat("G", "b1", false, "gpu")
	if sum := env.Reap(); sum.ChecksScheduled != 1 {
		t.Fatalf("the first reap scheduled %d checks, want 1 (on A)", sum.ChecksScheduled)
	}
	check := dueCheck(env, "A")
	if check == "" || leasedTo(env, "A") != check || dueCheck(env, "G") != "" {
		t.Fatalf("A's check %q, A leased to %q, G's %q", check, leasedTo(env, "A"), dueCheck(env, "G"))
	}
	if sum := env.Reap(); sum.ChecksScheduled != 0 {
		t.Fatalf("a reap while the check runs scheduled %d more", sum.ChecksScheduled)
	}
	env.Finish("A", "b1", check, wire.ReportSucceeded)
	if sum := env.Reap(); sum.ChecksScheduled != 0 || dueCheck(env, "A") != "" {
		t.Fatalf("a reap within the period scheduled %d", sum.ChecksScheduled)
	}
	env.Exec(`UPDATE runs SET created_at = created_at - interval '61 minutes' WHERE run_id = $1`, check)
	if sum := env.Reap(); sum.ChecksScheduled != 1 || dueCheck(env, "A") == "" {
		t.Fatalf("a reap past the period scheduled %d", sum.ChecksScheduled)
	}
	env.CheckInvariants()
}

// A cancelled check leaves its node's health as it was and the node open to other work.
func TestACancelledCheckOpensTheNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("first", "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	failAsInfra(env, "A", "b1", "first", "board")
	check := dueCheck(env, "A")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("next", "board")); resp.Status != 202 {
		t.Fatalf("a run while the check is due: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "POST", "/v1/runs/"+check+"/cancel", map[string]any{"force": true}); resp.Status != 200 {
		t.Fatalf("cancel the check: %s", resp)
	}
	if n := nodeView(env, "A"); n.Health != wire.HealthSuspect || n.HealthCheckDue || leasedTo(env, "A") != "next" {
		t.Fatalf("after the check was cancelled: %+v, A leased to %q", n, leasedTo(env, "A"))
	}
	env.CheckInvariants()
}

// A check that passes on a node an admin quarantined while it ran leaves the admin's
// quarantine as it was: only an admin lifts it.
func TestAPassingCheckLiftsNoQuarantineMadeMeanwhile(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	_, check := quarantineAndLift(env, "A")
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "the hub again"}))
	env.Finish("A", "b1", check, wire.ReportSucceeded)
	n := nodeView(env, "A")
	if n.Health != wire.HealthQuarantined || n.QuarantinedBy == nil || *n.QuarantinedBy != "admin:ops" ||
		*n.HealthReason != "the hub again" || n.HealthCheckDue {
		t.Fatalf("after the check passed under an admin's quarantine: %+v", n)
	}
	env.CheckInvariants()
}

// A health check waiting for its busy node shows in the queue with its needs, as any run does.
func TestTheQueueShowsAWaitingCheck(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("busy", "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	if _, check := quarantineAndLift(env, "A"); check == "" || leasedTo(env, "A") != "busy" {
		t.Fatalf("a check due on a busy node: %q, leased to %q", dueCheck(env, "A"), leasedTo(env, "A"))
	}
	resp := env.Do(apitest.Admin, "GET", "/v1/queue", nil)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), `"node_id=A"`) {
		t.Fatalf("the queue with a check waiting: %s", resp)
	}
}

// A report that frees a node while a check waits for it: the report goes through, and the check
// is placed on the node before the run queued for it.
func TestAReportWithACheckQueuedFreesItsNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("busy", "board")); resp.Status != 201 {
		t.Fatal(resp)
	}
	_, check := quarantineAndLift(env, "A")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("next", "board")); resp.Status != 202 {
		t.Fatal(resp)
	}
	env.Finish("A", "b1", "busy", wire.ReportSucceeded)
	if leasedTo(env, "A") != check || env.State("next") != wire.Queued {
		t.Fatalf("after busy ended: A leased to %q (the check is %s), next %s", leasedTo(env, "A"), check, env.State("next"))
	}
	env.Reap() // the unservable sweep reads every queued shape, the check's too
	if env.State(check) != wire.Running {
		t.Fatalf("the reap moved the check: %s", env.State(check))
	}
	env.CheckInvariants()
}

// A check waiting for a node that leaves the fleet fails no_capable_node with it, as any run
// only that node could serve: the unservable sweep judges a check by its role's needs.
func TestACheckWhoseNodeLeftFails(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	registerCheck(env, "usb", nil, "board")
	env.Beat("A", "b1", false, "board")
	nodeAnswer(env, env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "x"}))
	env.Beat("A", "b1", true, "board") // draining: the check, once scheduled, waits
	nodeAnswer(env, env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/quarantine", nil))
	check := dueCheck(env, "A")
	if check == "" || env.State(check) != wire.Queued {
		t.Fatalf("a check on a draining node: %q", check)
	}
	if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/A", nil); resp.Status/100 != 2 {
		t.Fatal(resp)
	}
	var reason string
	if err := env.Store.Pool().QueryRow(t.Context(), `SELECT coalesce(reason, '') FROM runs WHERE run_id = $1`, check).Scan(&reason); err != nil ||
		env.State(check) != wire.Failed || reason != wire.ReasonNoCapableNode {
		t.Fatalf("a check whose node left: %s %q %v", env.State(check), reason, err)
	}
	env.CheckInvariants()
}

package publish_test

// Run and node events reach EventBridge — the real SDK client, against a local server that
// speaks PutEvents — each once in the normal path, sent by the handler that wrote them before it
// answers, never lost when EventBridge fails for a while or refuses some entries, and published
// by the reaper when the handler that wrote them could not.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"mediator/localdev/apitest"
	"mediator/localdev/eventbus"
	"mediator/localdev/pgcount"
	"mediator/shared/publish"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// setup is a test's Mediator whose handlers publish to a stand-in bus.
func setup(t *testing.T, opts ...apitest.Option) (*apitest.Env, *eventbus.Bus) {
	t.Helper()
	bus := &eventbus.Bus{}
	srv := httptest.NewServer(bus)
	t.Cleanup(srv.Close)
	env := apitest.New(t, append(opts, apitest.Publisher(func(st *store.Store, log *slog.Logger) *publish.Publisher {
		return publish.New(client(srv.URL), "mediator-test", st, log)
	}))...)
	return env, bus
}

// client is the real EventBridge client, pointed at the stand-in, with no retries of its own:
// the publisher's are the ones under test.
func client(endpoint string) *eventbridge.Client {
	return eventbridge.New(eventbridge.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(endpoint), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	})
}

var alice = apitest.Client("alice")

func run(id string) map[string]any {
	return map[string]any{"run_id": id, "needs": []string{"board"}, "steps": []map[string]any{{"id": "s1"}}}
}

// received is what the bus accepted of run events, as (event id, seq) of each detail, by run.
func received(t *testing.T, bus *eventbus.Bus) map[string][][2]int64 {
	t.Helper()
	out := map[string][][2]int64{}
	for _, e := range bus.Accepted() {
		if e.DetailType == publish.NodeDetailType {
			continue // nodeEvents reads those
		}
		if e.Source != publish.Source || e.DetailType != publish.DetailType || e.EventBusName != "mediator-test" {
			t.Fatalf("an entry not as rules match it: %+v", e)
		}
		var d publish.Detail
		if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
			t.Fatal(err)
		}
		out[d.RunID] = append(out[d.RunID], [2]int64{d.EventID, d.Seq})
	}
	return out
}

// history is every event of every run as the database holds them, (event id, seq) by run.
func history(t *testing.T, env *apitest.Env) map[string][][2]int64 {
	t.Helper()
	rows, err := env.Store.Pool().Query(context.Background(), `SELECT run_id, event_id,
		row_number() OVER (PARTITION BY run_id ORDER BY event_id) FROM run_events ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][][2]int64{}
	for rows.Next() {
		var runID string
		var id, seq int64
		if err := rows.Scan(&runID, &id, &seq); err != nil {
			t.Fatal(err)
		}
		out[runID] = append(out[runID], [2]int64{id, seq})
	}
	return out
}

// sameEvents: the bus got every event of the history once, each run's in order.
func sameEvents(t *testing.T, env *apitest.Env, bus *eventbus.Bus) {
	t.Helper()
	got, want := received(t, bus), history(t, env)
	for runID, events := range want {
		if !slices.Equal(got[runID], events) {
			t.Errorf("run %s: the bus got %v; its history is %v", runID, got[runID], events)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the bus got events of %d runs, the history has %d", len(got), len(want))
	}
	if n := env.Count(`SELECT count(*) FROM run_events_unpublished`); n != 0 {
		t.Errorf("%d events still marked unpublished", n)
	}
}

// play is two runs' lives through the handlers: a placed at once, b queued behind it, promoted
// when a finishes, then finished.
func play(t *testing.T, env *apitest.Env) {
	t.Helper()
	env.Beat("A", "b1", false, "board")
	if r := env.Do(alice, "POST", "/v1/runs", run("a")); r.Status != 201 {
		t.Fatalf("a: %s", r)
	}
	if r := env.Do(alice, "POST", "/v1/runs", run("b")); r.Status != 202 {
		t.Fatalf("b: %s", r)
	}
	env.Finish("A", "b1", "a", "succeeded")
	env.Finish("A", "b1", "b", "succeeded")
	if env.State("b") != wire.Succeeded {
		t.Fatalf("b is %s", env.State("b"))
	}
}

func TestARunsWholeLifeArrivesInOrderOnce(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	play(t, env)
	sameEvents(t, env, bus)
	if got := received(t, bus)["b"]; len(got) != 3 { // submitted (QUEUED), promoted, settled
		t.Fatalf("b's events: %v", got)
	}
}

// ago moves the outbox's marks into the past: written, never slept.
func ago(env *apitest.Env, seconds int) {
	env.Exec(`UPDATE run_events_unpublished SET recorded_at = recorded_at - make_interval(secs => $1),
		claimed_until = claimed_until - make_interval(secs => $1)`, seconds)
}

// EventBridge fails every call for a while: the handlers answer as always, nothing is lost, and
// the reaper publishes everything once it is back.
func TestNothingIsLostWhileEventBridgeIsDown(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	bus.SetDown(true)
	play(t, env)
	if len(bus.Accepted()) != 0 || env.Count(`SELECT count(*) FROM run_events_unpublished`) == 0 {
		t.Fatal("events were published, or not kept, while the bus was down")
	}
	ago(env, 60)
	if sum := env.Reap(); sum.Published != 0 {
		t.Fatalf("published %d while the bus was still down", sum.Published)
	}
	bus.SetDown(false)
	ago(env, 60)
	if sum := env.Reap(); sum.Published == 0 {
		t.Fatalf("the reaper published nothing once the bus was back: %+v", sum)
	}
	sameEvents(t, env, bus)
}

// EventBridge refuses some entries of a call (FailedEntryCount): only those are sent again.
func TestOnlyRefusedEntriesAreSentAgain(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	refusedOnce := map[string]bool{}
	bus.Refuse(func(e eventbus.Entry) bool {
		var d publish.Detail
		_ = json.Unmarshal([]byte(e.Detail), &d)
		key := fmt.Sprint(d.EventID)
		if d.Seq%2 == 1 && !refusedOnce[key] { // every other event, the first time it comes
			refusedOnce[key] = true
			return true
		}
		return false
	})
	play(t, env)
	_, refused := bus.Counts()
	if refused == 0 {
		t.Fatal("the stand-in refused nothing: the case did not happen")
	}
	sameEvents(t, env, bus) // accepted once each: the accepted ones were not sent twice
}

// A handler that dies between its COMMIT and its publishing leaves the events marked; the
// reaper publishes them, once they are older than a handler would take.
func TestTheReaperPublishesWhatAHandlerLeft(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	dead := env.Deps
	dead.Publisher = nil // the handler's process ends right after its COMMIT
	env.Beat("A", "b1", false, "board")
	resp := env.DoWith(dead, alice, "POST", "/v1/runs", run("a"))
	if resp.Status != 201 || len(bus.Accepted()) != 0 {
		t.Fatalf("submit: %s; %d published", resp, len(bus.Accepted()))
	}
	if sum := env.Reap(); sum.Published != 0 {
		t.Fatalf("the reaper took a fresh event from its handler: %+v", sum)
	}
	ago(env, 60)
	if sum := env.Reap(); sum.Published != 1 {
		t.Fatalf("the reaper published %d of the dead handler's events, want 1", sum.Published)
	}
	sameEvents(t, env, bus)
}

// nodeEvents is what the bus accepted of node events, in the order it accepted them.
func nodeEvents(t *testing.T, bus *eventbus.Bus) []publish.NodeDetail {
	t.Helper()
	var got []publish.NodeDetail
	for _, e := range bus.Accepted() {
		if e.DetailType != publish.NodeDetailType {
			continue
		}
		if e.Source != publish.Source || e.EventBusName != "mediator-test" {
			t.Fatalf("an entry not as rules match it: %+v", e)
		}
		var d publish.NodeDetail
		if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind != "node_health_changed" {
			t.Fatalf("a node event of kind %q", d.Kind)
		}
		got = append(got, d)
	}
	return got
}

// moves is each node event as node:from>to by whom.
func moves(events []publish.NodeDetail) []string {
	out := make([]string, len(events))
	for i, d := range events {
		out[i] = d.NodeID + ":" + d.From + ">" + d.To + " by " + d.By
	}
	return out
}

// noneLeft: every node event of the history was sent, none is still marked.
func noneLeft(t *testing.T, env *apitest.Env, bus *eventbus.Bus) {
	t.Helper()
	if n := env.Count(`SELECT count(*) FROM node_events_unpublished`); n != 0 {
		t.Errorf("%d node events still marked", n)
	}
	if got, want := len(nodeEvents(t, bus)), env.Count(`SELECT count(*) FROM node_history WHERE kind = 'health'`); got != want {
		t.Errorf("the bus got %d node events, the history has %d", got, want)
	}
}

// An admin's quarantine goes out as node_health_changed through the same outbox, once, with
// who moved it and why: published by the handler before it answers, so the reaper finds
// nothing left to send. Lifting it is published the same way.
func TestAnAdminsQuarantineIsPublishedBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "usb hub"}); resp.Status != 200 {
		t.Fatal(resp)
	}
	got := nodeEvents(t, bus)
	if len(got) != 1 || got[0].NodeID != "A" || got[0].From != wire.HealthHealthy ||
		got[0].To != wire.HealthQuarantined || got[0].By != "admin:ops" || got[0].Reason == nil || *got[0].Reason != "usb hub" {
		t.Fatalf("published by the time the handler answered: %+v", got)
	}
	noneLeft(t, env, bus)
	if sum := env.Reap(); sum.Published != 0 {
		t.Fatalf("the reaper published %d events the handler had sent", sum.Published)
	}
	// A second admin's quarantine moves nothing, and sends nothing.
	if resp := env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", nil); resp.Status != 200 {
		t.Fatal(resp)
	}
	if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/quarantine", nil); resp.Status != 200 {
		t.Fatal(resp)
	}
	if got, want := moves(nodeEvents(t, bus)), []string{"A:healthy>quarantined by admin:ops", "A:quarantined>healthy by admin:ops"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	noneLeft(t, env, bus)
}

// reportInfra runs the step the node holds of runID to a failure of the infrastructure.
func reportInfra(t *testing.T, env *apitest.Env, node, runID string) apitest.Response {
	t.Helper()
	epoch := env.Epoch(node)
	if r := env.Report(node, "b1", epoch, runID, "s1", wire.ReportStarted); r.Status != 200 {
		t.Fatalf("started: %s", r)
	}
	return env.Do(apitest.Node(node), "POST", "/v1/runs/"+runID+"/steps/s1/result", map[string]any{
		"node_id": node, "boot_id": "b1", "epoch": epoch, "status": wire.ReportFailed, "exit_code": 3,
		"failure": wire.FailureInfra, "message": "no such device /dev/ttyUSB0",
	})
}

// A report that counts an infrastructure failure moves its node to suspect, and the report's
// handler publishes that change before it answers, beside the run's events; a success after
// it makes the node healthy again, published the same way. A routine success — nothing to
// reset — asks for no node event. The reaper is never run.
func TestAReportsHealthChangeIsPublishedBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	var tags pgcount.Tags
	env, bus := setup(t, apitest.Tracer(&tags))
	env.Beat("A", "b1", false, "board")
	if r := env.Do(alice, "POST", "/v1/runs", run("a")); r.Status != 201 {
		t.Fatalf("a: %s", r)
	}
	if r := reportInfra(t, env, "A", "a"); r.Status != 200 {
		t.Fatalf("the failed report: %s", r)
	}
	got := nodeEvents(t, bus)
	if len(got) != 1 || got[0].NodeID != "A" || got[0].From != wire.HealthHealthy || got[0].To != wire.HealthSuspect ||
		got[0].By != "system" || got[0].Reason == nil || !strings.Contains(*got[0].Reason, "no such device") {
		t.Fatalf("published by the time the report was answered: %+v", got)
	}
	noneLeft(t, env, bus)
	if r := env.Do(alice, "POST", "/v1/runs", run("b")); r.Status != 201 {
		t.Fatalf("b: %s", r)
	}
	env.Finish("A", "b1", "b", wire.ReportSucceeded)
	if got, want := moves(nodeEvents(t, bus)), []string{"A:healthy>suspect by system", "A:suspect>healthy by system"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	if r := env.Do(alice, "POST", "/v1/runs", run("c")); r.Status != 201 {
		t.Fatalf("c: %s", r)
	}
	mark := tags.Mark()
	env.Finish("A", "b1", "c", wire.ReportSucceeded)
	if sent := tags.Since(mark); slices.Contains(sent, "events: claim of nodes") || len(nodeEvents(t, bus)) != 2 {
		t.Fatalf("a routine report sent %v; %d node events published", sent, len(nodeEvents(t, bus)))
	}
	noneLeft(t, env, bus)
	sameEvents(t, env, bus)
}

// A heartbeat whose checks fail quarantines its node, and the heartbeat's handler publishes
// the change before it answers; so does the one that lifts it. A routine heartbeat — nothing
// said that changes the node's health — sends nothing and asks for nothing to send, and
// neither does a new reason for a quarantine the node already has.
func TestAHeartbeatsHealthChangeIsPublishedAndARoutineOneSendsNothing(t *testing.T) {
	t.Parallel()
	var tags pgcount.Tags
	env, bus := setup(t, apitest.Tracer(&tags))
	beat := func(unhealthy string) {
		t.Helper()
		body := map[string]any{"boot_id": "b1", "labels": []string{"board"}}
		if unhealthy != "" {
			body["unhealthy"] = unhealthy
		}
		if resp := env.Do(apitest.Node("A"), "PUT", "/v1/nodes/A", body); resp.Status != 200 {
			t.Fatalf("heartbeat: %s", resp)
		}
	}
	beat("")
	mark := tags.Mark()
	beat("")
	if sent := tags.Since(mark); slices.Contains(sent, "events: claim of nodes") || len(bus.Accepted()) != 0 {
		t.Fatalf("a routine heartbeat sent %v and published %d events", sent, len(bus.Accepted()))
	}
	mark = tags.Mark()
	beat("disk full")
	if got := moves(nodeEvents(t, bus)); !slices.Equal(got, []string{"A:healthy>quarantined by self"}) ||
		!slices.Contains(tags.Since(mark), "events: claim of nodes") {
		t.Fatalf("published by the time the heartbeat was answered: %v, having sent %v", got, tags.Since(mark))
	}
	mark = tags.Mark()
	beat("disk still full")
	beat("disk still full")
	if sent := tags.Since(mark); slices.Contains(sent, "events: claim of nodes") || len(bus.Accepted()) != 1 {
		t.Fatalf("heartbeats that moved nothing sent %v; %d events published", sent, len(bus.Accepted()))
	}
	beat("")
	if got, want := moves(nodeEvents(t, bus)), []string{"A:healthy>quarantined by self", "A:quarantined>healthy by self"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	noneLeft(t, env, bus)
}

// A lease the reaper finds expired counts against its node, and the reap publishes that change
// in the same invocation, as a handler would: it is not left for a later reap.
func TestTheReapPublishesTheHealthItMoved(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	env.Beat("A", "b1", false, "board")
	if r := env.Do(alice, "POST", "/v1/runs", run("a")); r.Status != 201 {
		t.Fatalf("a: %s", r)
	}
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = 'A'`)
	env.Exec(`UPDATE heartbeat_pulse SET heard_at = now()`) // the fleet is heard: the loss is the node's
	sum := env.Reap()
	if sum.Expired != 1 {
		t.Fatalf("reaped %+v", sum)
	}
	if got := moves(nodeEvents(t, bus)); !slices.Equal(got, []string{"A:healthy>suspect by system"}) || sum.Published < 1 {
		t.Fatalf("the reap published %v (%d in all)", got, sum.Published)
	}
	noneLeft(t, env, bus)
}

// A handler that dies between its COMMIT and its publishing leaves its node's event marked;
// the reaper leaves it to the handler while it is fresh, and sends it once it is not.
func TestTheReaperPublishesANodeEventAHandlerLeft(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	dead := env.Deps
	dead.Publisher = nil
	env.Beat("A", "b1", false, "board")
	if resp := env.DoWith(dead, apitest.Admin, "POST", "/v1/nodes/A/quarantine", nil); resp.Status != 200 || len(bus.Accepted()) != 0 {
		t.Fatalf("quarantine: %s; %d published", resp, len(bus.Accepted()))
	}
	if sum := env.Reap(); sum.Published != 0 {
		t.Fatalf("the reaper took a fresh node event from its handler: %+v", sum)
	}
	env.Exec(`UPDATE node_events_unpublished SET recorded_at = recorded_at - interval '60 seconds'`)
	if sum := env.Reap(); sum.Published != 1 {
		t.Fatalf("the reaper published %d of the dead handler's node events, want 1", sum.Published)
	}
	noneLeft(t, env, bus)
}

// A hold's notices reach the bus as every run event does, each detail naming the run's kind,
// so that a rule matches holds by it: hold_placed and hold_ended from the handlers that placed
// and released it, hold_expiring from the reaper's outbox. An ordinary run's are of kind run.
func TestAHoldsNoticesArriveWithTheirRunKind(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	env.Beat("A", "b1", false, "board")
	if r := env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "h", "needs": []string{"board"}, "hold_seconds": 300}); r.Status != 201 {
		t.Fatalf("h: %s", r)
	}
	if sum := env.Reap(); sum.HoldsWarned != 1 {
		t.Fatalf("the reap warned %d holds", sum.HoldsWarned)
	}
	ago(env, 60)
	env.Reap()
	env.Do(alice, "POST", "/v1/runs/h/release", nil)
	env.Do(alice, "POST", "/v1/runs", run("r"))
	sameEvents(t, env, bus)
	kinds := map[string][]string{}
	for _, e := range bus.Accepted() {
		var d publish.Detail
		if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
			t.Fatal(err)
		}
		if e.DetailType != publish.DetailType {
			continue
		}
		kinds[d.RunID] = append(kinds[d.RunID], d.RunKind+":"+d.Kind)
		if !strings.Contains(e.Detail, `"run_kind":`) {
			t.Fatalf("a detail without run_kind: %s", e.Detail)
		}
	}
	if got := strings.Join(kinds["h"], " "); got != "hold:submitted hold:hold_placed hold:hold_expiring hold:hold_released hold:hold_ended" {
		t.Fatalf("the hold's events on the bus: %s", got)
	}
	if got := strings.Join(kinds["r"], " "); got != "run:submitted" {
		t.Fatalf("the run's events on the bus: %s", got)
	}
}

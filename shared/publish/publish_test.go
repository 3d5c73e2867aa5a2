package publish_test

// Run events reach EventBridge — the real SDK client, against a local server that speaks
// PutEvents — each once in the normal path, never lost when EventBridge fails for a while or
// refuses some entries, and published by the reaper when the handler that wrote them could not.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"mediator/localdev/apitest"
	"mediator/localdev/eventbus"
	"mediator/shared/publish"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// setup is a test's Mediator whose handlers publish to a stand-in bus.
func setup(t *testing.T) (*apitest.Env, *eventbus.Bus) {
	t.Helper()
	bus := &eventbus.Bus{}
	srv := httptest.NewServer(bus)
	t.Cleanup(srv.Close)
	env := apitest.New(t, apitest.Publisher(func(st *store.Store, log *slog.Logger) *publish.Publisher {
		return publish.New(client(srv.URL), "mediator-test", st, log)
	}))
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

// received is what the bus accepted, as (event id, seq) of each detail, by run.
func received(t *testing.T, bus *eventbus.Bus) map[string][][2]int64 {
	t.Helper()
	out := map[string][][2]int64{}
	for _, e := range bus.Accepted() {
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

// A node's change of health goes out through the same outbox, as node_health_changed: once,
// with who moved it and why, sent by the reaper.
func TestANodesHealthChangeIsPublishedOnce(t *testing.T) {
	t.Parallel()
	env, bus := setup(t)
	env.Beat("A", "b1", false, "board")
	if resp := env.Do(apitest.Admin, "POST", "/v1/nodes/A/quarantine", map[string]any{"reason": "usb hub"}); resp.Status != 200 {
		t.Fatal(resp)
	}
	if n := env.Count(`SELECT count(*) FROM node_events_unpublished`); n != 1 {
		t.Fatalf("%d node events marked, want 1", n)
	}
	if sum := env.Reap(); sum.Published != 1 {
		t.Fatalf("the reaper published %d node events, want 1", sum.Published)
	}
	env.Reap()
	var got []publish.NodeDetail
	for _, e := range bus.Accepted() {
		if e.DetailType != publish.NodeDetailType || e.Source != publish.Source {
			t.Fatalf("an entry not as rules match it: %+v", e)
		}
		var d publish.NodeDetail
		if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if len(got) != 1 || got[0].Kind != "node_health_changed" || got[0].NodeID != "A" || got[0].From != wire.HealthHealthy ||
		got[0].To != wire.HealthQuarantined || got[0].By != "admin:ops" || got[0].Reason == nil || *got[0].Reason != "usb hub" {
		t.Fatalf("published: %+v", got)
	}
	if n := env.Count(`SELECT count(*) FROM node_events_unpublished`); n != 0 {
		t.Fatalf("%d node events still marked", n)
	}
}

package httpapi_test

// The queue orders by priority, then arrival, among runs that contend for the same nodes —
// whatever their kind — and a run that has waited past STARVATION_SECONDS goes first whatever
// its priority.

import (
	"encoding/json"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/store"
	"mediator/shared/wire"
)

func prioritized(id string, priority int, needs ...string) map[string]any {
	r := oneNodeRun(id, needs[0])
	r["needs"] = needs
	r["priority"] = priority
	return r
}

// holdA: node A (board, usb) is held by run "hold"; the runs submitted next queue behind it.
func holdA(t *testing.T) *apitest.Env {
	t.Helper()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Starvation = time.Hour }))
	env.Beat("A", "b1", false, "board", "usb")
	if r := env.Do(alice, "POST", "/v1/runs", oneNodeRun("hold", "board")); r.Status != 201 {
		t.Fatalf("hold: %s", r)
	}
	return env
}

// submitAll queues the runs in this order, as an admin (priorities above 50 are admins').
func submitAll(t *testing.T, env *apitest.Env, runs ...map[string]any) {
	t.Helper()
	for _, r := range runs {
		if resp := env.Do(apitest.Admin, "POST", "/v1/runs", r); resp.Status != 202 {
			t.Fatalf("%s: %s", r["run_id"], resp)
		}
	}
}

// free finishes whatever holds A, and says which run A went to.
func free(t *testing.T, env *apitest.Env, holder string) string {
	t.Helper()
	env.Finish("A", "b1", holder, "succeeded")
	var run string
	if err := env.Store.Pool().QueryRow(t.Context(), `SELECT run_id FROM leases WHERE node_id = 'A'`).Scan(&run); err != nil {
		t.Fatalf("A took no run once %s was done: %v", holder, err)
	}
	return run
}

func TestPriorityOrdersContenders(t *testing.T) {
	t.Parallel()
	t.Run("a later, more urgent run of another kind goes first", func(t *testing.T) {
		t.Parallel()
		env := holdA(t)
		submitAll(t, env, prioritized("board-50", 50, "board"), prioritized("usb-80", 80, "usb"))
		if got := free(t, env, "hold"); got != "usb-80" {
			t.Fatalf("A went to %s", got)
		}
	})
	t.Run("equal priorities keep arrival order, across kinds", func(t *testing.T) {
		t.Parallel()
		env := holdA(t)
		submitAll(t, env, prioritized("usb-first", 60, "usb"), prioritized("board-second", 60, "board"))
		if got := free(t, env, "hold"); got != "usb-first" {
			t.Fatalf("A went to %s", got)
		}
	})
	t.Run("within one kind, priority then arrival", func(t *testing.T) {
		t.Parallel()
		env := holdA(t)
		submitAll(t, env, prioritized("low", 10, "board"), prioritized("high", 90, "board"), prioritized("high-later", 90, "board"))
		got := free(t, env, "hold")
		if got != "high" {
			t.Fatalf("A went to %s first", got)
		}
		if got = free(t, env, got); got != "high-later" {
			t.Fatalf("A went to %s second", got)
		}
		if got = free(t, env, got); got != "low" {
			t.Fatalf("A went to %s third", got)
		}
	})
	t.Run("a run an admin raises overtakes", func(t *testing.T) {
		t.Parallel()
		env := holdA(t)
		submitAll(t, env, prioritized("first", 50, "board"), prioritized("raised", 50, "usb"))
		var answer runReply
		r := env.Do(apitest.Admin, "POST", "/v1/runs/raised/priority", map[string]any{"priority": 70})
		r.Decode(t, &answer)
		if r.Status != 200 || answer.Run.Priority != 70 || answer.Run.State != wire.Queued {
			t.Fatalf("raise: %s", r)
		}
		if got := free(t, env, "hold"); got != "raised" {
			t.Fatalf("A went to %s", got)
		}
		var got struct {
			History []store.Event `json:"history"`
		}
		env.Do(apitest.Admin, "GET", "/v1/runs/raised", nil).Decode(t, &got)
		if len(got.History) < 2 || got.History[1].Kind != "priority_changed" {
			t.Fatalf("raised's history: %+v", got.History)
		}
	})
	t.Run("a starving low-priority run goes before newer urgent ones", func(t *testing.T) {
		t.Parallel()
		env := holdA(t)
		submitAll(t, env, prioritized("starving", 0, "board"), prioritized("urgent", 100, "usb"), prioritized("urgent-board", 100, "board"))
		env.Exec(`UPDATE runs SET created_at = now() - interval '2 hours' WHERE run_id = 'starving'`)
		if got := free(t, env, "hold"); got != "starving" {
			t.Fatalf("A went to %s", got)
		}
	})
}

func TestPriorityIsAdmins(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	if r := env.Do(alice, "POST", "/v1/runs", prioritized("too-urgent", 51, "board")); r.Status != 403 {
		t.Fatalf("a client's priority 51: %s", r)
	}
	if r := env.Do(alice, "POST", "/v1/runs", prioritized("ok", 50, "board")); r.Status != 201 {
		t.Fatalf("a client's priority 50: %s", r)
	}
	// The default and 50 are one request: a run stored without a priority answers 200 again.
	if r := env.Do(alice, "POST", "/v1/runs", oneNodeRun("ok", "board")); r.Status != 200 {
		t.Fatalf("the same run without a priority: %s", r)
	}
	if r := env.Do(alice, "POST", "/v1/runs", prioritized("ok", 40, "board")); r.Status != 409 {
		t.Fatalf("the same run_id with another priority: %s", r)
	}
	if r := env.Do(alice, "POST", "/v1/runs/ok/priority", map[string]any{"priority": 10}); r.Status != 403 {
		t.Fatalf("a client changed a priority: %s", r)
	}
	if r := env.Do(apitest.Admin, "POST", "/v1/runs/ok/priority", map[string]any{"priority": 10}); r.Status != 409 ||
		!containsCode(r, "run_not_queued") {
		t.Fatalf("a RUNNING run's priority: %s", r)
	}
	var page struct {
		Runs []store.Run `json:"runs"`
	}
	env.Do(apitest.Admin, "GET", "/v1/runs?priority=50", nil).Decode(t, &page)
	if len(page.Runs) != 1 || page.Runs[0].RunID != "ok" {
		t.Fatalf("runs of priority 50: %+v", page.Runs)
	}
}

func containsCode(r apitest.Response, code string) bool {
	var p struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(r.Body, &p) == nil && p.Code == code
}

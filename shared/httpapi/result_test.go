package httpapi_test

import (
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

func getRun(t *testing.T, env *apitest.Env, id string) store.Run {
	t.Helper()
	var body struct {
		Run store.Run `json:"run"`
	}
	resp := env.Do(apitest.Admin, "GET", "/v1/runs/"+id, nil)
	if resp.Status != 200 {
		t.Fatalf("GET %s: %s", id, resp)
	}
	resp.Decode(t, &body)
	return body.Run
}

// Placed, queued, promoted when the node frees, refused when no node could ever serve it:
// through the handlers.
func TestPlacedQueuedPromotedRefused(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board=rpi4")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("a", "board=rpi4", "flash", "test")); resp.Status != 201 {
		t.Fatalf("submit a: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board=rpi4")); resp.Status != 202 {
		t.Fatalf("submit b: %s", resp)
	}
	if got := getRun(t, env, "b"); got.State != wire.Queued {
		t.Fatalf("status b: %s", got.State)
	}
	epoch := env.Epoch("A")
	for _, step := range []string{"flash", "test"} {
		env.Report("A", "boot-1", epoch, "a", step, "started")
		resp := env.Report("A", "boot-1", epoch, "a", step, "succeeded")
		if resp.Status != 200 {
			t.Fatalf("a/%s succeeded: %s", step, resp)
		}
	}
	// The result call has returned: a settled, and b was promoted inside that call.
	if got := getRun(t, env, "a"); got.State != wire.Succeeded {
		t.Fatalf("a: %s", got.State)
	}
	if got := getRun(t, env, "b"); got.State != wire.Running || got.Assigned["main"] != "A" {
		t.Fatalf("b after a finished: %s on %v", got.State, got.Assigned)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("c", "gpu")); resp.Status != 422 || !strings.Contains(string(resp.Body), `"FAILED"`) {
		t.Fatalf("submit c: %s", resp)
	}
	env.CheckInvariants()
}

// One node of a two-role run finishes first: its lease goes at once, and a queued one-role run
// takes the node while the other node is still working.
func TestPartialRelease(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	resp := env.Do(alice, "POST", "/v1/runs", map[string]any{
		"run_id": "pair", "roles": map[string]any{"x": map[string]any{"needs": []string{"board"}}, "y": map[string]any{"needs": []string{"board"}}},
		"steps": []map[string]any{{"id": "quick", "role": "x"}, {"id": "slow", "role": "y"}},
	})
	var pair struct {
		Run store.Run `json:"run"`
	}
	resp.Decode(t, &pair)
	if resp.Status != 201 {
		t.Fatalf("pair: %s", resp)
	}
	quickNode, slowNode := pair.Run.Assigned["x"], pair.Run.Assigned["y"]
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("single", "board"))
	if env.State("single") != wire.Queued {
		t.Fatal("single should wait")
	}
	env.Report(slowNode, "boot-1", env.Epoch(slowNode), "pair", "slow", "started")
	env.Finish(quickNode, "boot-1", "pair", "succeeded")
	if got := getRun(t, env, "single"); got.State != wire.Running || got.Assigned["main"] != quickNode {
		t.Fatalf("single: %s on %v; want RUNNING on %s", got.State, got.Assigned, quickNode)
	}
	if got := getRun(t, env, "pair"); got.State != wire.Running {
		t.Fatalf("pair while slow still runs: %s", got.State)
	}
	env.CheckInvariants()
}

// A report fenced by an epoch from before the run was requeued and placed again is refused
// and changes nothing.
func TestStaleEpochRefused(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	run := oneNodeRun("r", "board")
	run["max_attempts"] = 2
	env.Do(alice, "POST", "/v1/runs", run)
	old := env.Epoch("A")
	env.Report("A", "boot-1", old, "r", "s1", "started")
	// A restarts: r is requeued and, A being free again, placed on it under a new epoch.
	env.Beat("A", "boot-2", false, "board")
	fresh := env.Epoch("A")
	if fresh == 0 || fresh == old || getRun(t, env, "r").Attempt != 2 {
		t.Fatalf("r was not placed again: epoch %d (was %d)", fresh, old)
	}
	before := getRun(t, env, "r")
	resp := env.Report("A", "boot-2", old, "r", "s1", "succeeded")
	if resp.Status != 409 || !strings.Contains(string(resp.Body), "stale_assignment") {
		t.Fatalf("stale report: %s", resp)
	}
	if after := getRun(t, env, "r"); after.Steps[0].State != before.Steps[0].State || after.State != before.State {
		t.Fatalf("the stale report changed %+v into %+v", before, after)
	}
}

func TestReportRules(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", map[string]any{"run_id": "r", "needs": []string{"board"}, "steps": []map[string]any{
		{"id": "build", "retries": 1}, {"id": "test", "after": []string{"build"}}, {"id": "report", "after": []string{"test"}},
	}})
	e := env.Epoch("A")
	if resp := env.Report("A", "boot-1", e, "r", "test", "started"); resp.Status != 409 || !strings.Contains(string(resp.Body), "not_runnable") {
		t.Fatalf("test before build: %s", resp)
	}
	if resp := env.Report("A", "boot-2", e, "r", "build", "started"); resp.Status != 409 {
		t.Fatalf("another boot: %s", resp)
	}
	if resp := env.Report("B", "boot-1", e, "r", "build", "started"); resp.Status != 403 && resp.Status != 409 {
		t.Fatalf("another node: %s", resp)
	}
	env.Report("A", "boot-1", e, "r", "build", "started")
	// A failure with a retry left goes back to PENDING on the same node: nothing is released.
	resp := env.Report("A", "boot-1", e, "r", "build", "failed")
	if resp.Status != 200 || !strings.Contains(string(resp.Body), `"step_state":"PENDING"`) || env.Epoch("A") != e {
		t.Fatalf("failed with a retry left: %s", resp)
	}
	env.Report("A", "boot-1", e, "r", "build", "started")
	env.Report("A", "boot-1", e, "r", "build", "succeeded")
	if resp := env.Report("A", "boot-1", e, "r", "build", "succeeded"); resp.Status != 200 {
		t.Fatalf("the same report twice: %s", resp)
	}
	if resp := env.Report("A", "boot-1", e, "r", "build", "failed"); resp.Status != 409 {
		t.Fatalf("a different report on a final step: %s", resp)
	}
	env.Report("A", "boot-1", e, "r", "test", "started")
	resp = env.Report("A", "boot-1", e, "r", "test", "failed")
	got := getRun(t, env, "r")
	if got.State != wire.Failed || *got.Reason != wire.ReasonStepFailed || got.Steps[2].State != wire.Skipped {
		t.Fatalf("after test failed for good: %s; %+v", resp, got)
	}
	if n := env.Count(`SELECT count(*) FROM leases`); n != 0 {
		t.Fatalf("%d leases after the settle", n)
	}
	// After the settle, the same final report again is still 200 and changes nothing.
	if resp := env.Report("A", "boot-1", e, "r", "test", "failed"); resp.Status != 200 {
		t.Fatalf("a repeat after the settle: %s", resp)
	}
	env.CheckInvariants()
}

// An oversized report is 413 and changes nothing.
func TestOversizedReport(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
	e := env.Epoch("A")
	env.Report("A", "boot-1", e, "r", "s1", "started")
	for field, size := range map[string]int{"message": 4097, "output": 65537} {
		resp := env.Do(apitest.Node("A"), "POST", "/v1/runs/r/steps/s1/result", map[string]any{
			"node_id": "A", "boot_id": "boot-1", "epoch": e, "status": "succeeded", field: strings.Repeat("x", size),
		})
		if resp.Status != 413 {
			t.Fatalf("%s of %d bytes: %s", field, size, resp)
		}
	}
	if got := getRun(t, env, "r"); got.Steps[0].State != wire.Running {
		t.Fatalf("an oversized report changed the step: %s", got.Steps[0].State)
	}
}

// A node whose last step just settled its run is handed the next queued run in the same
// answer: it goes on without waiting for its next heartbeat.
func TestResultHandsOverTheNextRun(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("first", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("second", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("next", "board"))
	node := getRun(t, env, "first").Assigned["main"]
	e := env.Epoch(node)
	env.Report(node, "boot-1", e, "first", "s1", "started")
	resp := env.Report(node, "boot-1", e, "first", "s1", "succeeded")
	var answer struct {
		NextRun *struct {
			Lease store.HeldLease  `json:"lease"`
			Steps []store.NodeStep `json:"steps"`
		} `json:"next_run"`
	}
	resp.Decode(t, &answer)
	if answer.NextRun == nil || answer.NextRun.Lease.RunID != "next" || len(answer.NextRun.Steps) != 1 || !answer.NextRun.Steps[0].Runnable {
		t.Fatalf("no next run handed over: %s", resp)
	}
	if r := env.Report(node, "boot-1", answer.NextRun.Lease.Epoch, "next", "s1", "started"); r.Status != 200 {
		t.Fatalf("starting the handed-over run: %s", r)
	}
}

// Exit codes within their status's rule are stored as reported: a succeeded step's 0, or
// none; a failed one's 0 to 255, or none (null is none); a started step's none. (Each rule
// broken is in TestHostileCatalogue.)
func TestExitCodesWithinTheirRulesAreStored(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	run := oneNodeRun("r", "board", "ok", "none", "null", "zero", "top")
	run["steps"] = []map[string]any{{"id": "ok"}, {"id": "none"}, {"id": "null"}, {"id": "zero"}, {"id": "top"}}
	if resp := env.Do(alice, "POST", "/v1/runs", run); resp.Status != 201 {
		t.Fatalf("submit: %s", resp)
	}
	report := func(step, status string, code any, set bool) apitest.Response {
		body := map[string]any{"node_id": "A", "boot_id": "b1", "epoch": env.Epoch("A"), "status": status}
		if set {
			body["exit_code"] = code
		}
		return env.Do(apitest.Node("A"), "POST", "/v1/runs/r/steps/"+step+"/result", body)
	}
	for _, c := range []struct {
		step, status string
		code         any
		set          bool
		want         string // the exit code stored, "" for none
	}{
		{"ok", wire.ReportSucceeded, 0, true, "0"},
		{"none", wire.ReportSucceeded, nil, false, ""},
		{"null", wire.ReportFailed, nil, true, ""},
		{"zero", wire.ReportFailed, 0, true, "0"},
		{"top", wire.ReportFailed, 255, true, "255"},
	} {
		if r := report(c.step, wire.ReportStarted, nil, true); r.Status != 200 {
			t.Fatalf("%s started, with a null exit_code: %s", c.step, r)
		}
		if r := report(c.step, c.status, c.code, c.set); r.Status != 200 {
			t.Fatalf("%s %s with exit_code %v: %s", c.step, c.status, c.code, r)
		}
		var got string
		if err := env.Store.Pool().QueryRow(t.Context(), `SELECT coalesce(exit_code::text, '') FROM steps WHERE run_id = 'r' AND step_id = $1`, c.step).Scan(&got); err != nil || got != c.want {
			t.Errorf("%s: exit_code %q stored (%v), want %q", c.step, got, err, c.want)
		}
	}
}

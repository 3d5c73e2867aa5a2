package httpapi_test

// What a node's agent needs from the API: each step it is handed says its role, the run's
// attempt, where every role is, and the outputs of the steps it waits for; a succeeded step
// reports outputs; an admin can drain a node from outside.

import (
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// pairRun: role dut's step "boot" reports an address; role host's step "measure" waits for it.
func pairRun(id string) map[string]any {
	return map[string]any{
		"run_id": id, "max_attempts": 2,
		"roles": map[string]any{"dut": map[string]any{"needs": []string{"dut"}}, "host": map[string]any{"needs": []string{"host"}}},
		"steps": []map[string]any{{"id": "boot", "role": "dut"}, {"id": "measure", "role": "host", "after": []string{"boot"}}},
	}
}

func succeedWith(env *apitest.Env, node, runID, step string, outputs map[string]string) apitest.Response {
	env.T.Helper()
	if r := env.Report(node, "b1", env.Epoch(node), runID, step, "started"); r.Status != 200 {
		env.T.Fatalf("started %s: %s", step, r)
	}
	return env.Do(apitest.Node(node), "POST", "/v1/runs/"+runID+"/steps/"+step+"/result", map[string]any{
		"node_id": node, "boot_id": "b1", "epoch": env.Epoch(node), "status": "succeeded", "exit_code": 0, "outputs": outputs,
	})
}

func TestOutputsReachTheStepsThatWaitForThem(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "dut")
	env.Beat("B", "b1", false, "host")
	if r := env.Do(alice, "POST", "/v1/runs", pairRun("p")); r.Status != 201 {
		t.Fatalf("submit: %s", r)
	}
	_, beat := env.Beat("A", "b1", false, "dut")
	if len(beat.Steps) != 1 {
		t.Fatalf("A's steps: %+v", beat.Steps)
	}
	st := beat.Steps[0]
	if st.Role != "dut" || st.Attempt != 1 || st.Assigned["dut"] != "A" || st.Assigned["host"] != "B" || len(st.Inputs) != 0 {
		t.Fatalf("boot as handed to A: %+v", st)
	}
	if r := succeedWith(env, "A", "p", "boot", map[string]string{"ip": "10.0.0.7"}); r.Status != 200 {
		t.Fatalf("succeeded with outputs: %s", r)
	}
	_, beat = env.Beat("B", "b1", false, "host")
	if len(beat.Steps) != 1 || !beat.Steps[0].Runnable || beat.Steps[0].Inputs["boot"]["ip"] != "10.0.0.7" {
		t.Fatalf("measure as handed to B: %+v", beat.Steps)
	}
	var got runReply
	env.Do(alice, "GET", "/v1/runs/p", nil).Decode(t, &got)
	if got.Run.Steps[0].Outputs["ip"] != "10.0.0.7" || got.Run.Steps[1].Outputs != nil {
		t.Fatalf("the run's steps: %+v", got.Run.Steps)
	}
	// B restarts while measure is still to run: the run is requeued (a second attempt), and
	// what the first attempt reported is gone with it. (A's lease went when boot succeeded.)
	env.Beat("B", "b2", false, "host")
	env.Do(alice, "GET", "/v1/runs/p", nil).Decode(t, &got)
	if got.Run.Attempt != 2 || got.Run.Steps[0].Outputs != nil {
		t.Fatalf("after the requeue: attempt %d, outputs %v", got.Run.Attempt, got.Run.Steps[0].Outputs)
	}
}

// Within one role, the result's answer hands the node the next step at once, with the outputs
// the report just carried as its inputs.
func TestTheNextStepCarriesTheOutputsJustReported(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	run := oneNodeRun("r", "board", "build", "test")
	run["steps"].([]map[string]any)[1]["after"] = []string{"build"}
	if r := env.Do(alice, "POST", "/v1/runs", run); r.Status != 201 {
		t.Fatalf("submit: %s", r)
	}
	r := succeedWith(env, "A", "r", "build", map[string]string{"ARTIFACT": "s3://b/1"})
	var answer struct {
		Next []store.NodeStep `json:"next"`
	}
	r.Decode(t, &answer)
	if len(answer.Next) != 1 || answer.Next[0].StepID != "test" || answer.Next[0].Inputs["build"]["ARTIFACT"] != "s3://b/1" ||
		answer.Next[0].Role != "main" || answer.Next[0].Assigned["main"] != "A" {
		t.Fatalf("next: %+v", answer.Next)
	}
}

func TestOutputsAreChecked(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
	env.Report("A", "b1", env.Epoch("A"), "r", "s1", "started")
	report := func(status string, outputs any) apitest.Response {
		return env.Do(apitest.Node("A"), "POST", "/v1/runs/r/steps/s1/result", map[string]any{
			"node_id": "A", "boot_id": "b1", "epoch": env.Epoch("A"), "status": status, "exit_code": 0, "outputs": outputs,
		})
	}
	before := snapshot(t, env)
	for name, c := range map[string]struct {
		status  string
		outputs any
		want    int
		path    string
	}{
		"a key that is no name":   {"succeeded", map[string]any{"1st": "x"}, 400, "outputs.1st"},
		"a value that is no text": {"succeeded", map[string]any{"n": 1}, 400, "outputs.n"},
		"not an object":           {"succeeded", []string{"x"}, 400, "outputs"},
		"with a failure":          {"failed", map[string]any{"n": "1"}, 400, "outputs"},
		"too large":               {"succeeded", map[string]any{"big": strings.Repeat("x", 5000)}, 413, "outputs"},
	} {
		r := report(c.status, c.outputs)
		if r.Status != c.want || !strings.Contains(string(r.Body), `"path":"`+strings.ReplaceAll(c.path, `"`, `\"`)+`"`) {
			t.Errorf("%s: %s; want %d at %s", name, r, c.want, c.path)
		}
	}
	if after := snapshot(t, env); !equalMaps(before, after) {
		t.Fatal("a refused report changed the database")
	}
}

// An admin drains a node from outside: it takes no new work, whatever its own heartbeat says,
// until an admin lifts the drain — and then the queue is woken for it before the answer.
func TestAnAdminDrainHoldsUntilLifted(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "b1", false, "board")
	var drained struct {
		Node store.Node `json:"node"`
	}
	if r := env.Do(alice, "POST", "/v1/nodes/A/drain", nil); r.Status != 403 {
		t.Fatalf("a client drained a node: %s", r)
	}
	if r := env.Do(apitest.Admin, "POST", "/v1/nodes/nope/drain", nil); r.Status != 404 {
		t.Fatalf("drain of an unknown node: %s", r)
	}
	r := env.Do(apitest.Admin, "POST", "/v1/nodes/A/drain", nil)
	r.Decode(t, &drained)
	if r.Status != 200 || !drained.Node.Draining || drained.Node.State != wire.NodeDraining ||
		drained.Node.DrainRequestedBy == nil || *drained.Node.DrainRequestedBy != "admin:ops" {
		t.Fatalf("drain: %s", r)
	}
	// The node's own heartbeat says it is not draining: the admin's drain stands.
	_, beat := env.Beat("A", "b1", false, "board")
	if !beat.Node.Draining || beat.Node.State != wire.NodeDraining {
		t.Fatalf("the node's heartbeat lifted an admin's drain: %+v", beat.Node)
	}
	if r := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board")); r.Status != 202 {
		t.Fatalf("a run went to a drained node: %s", r)
	}
	r = env.Do(apitest.Admin, "DELETE", "/v1/nodes/A/drain", nil)
	r.Decode(t, &drained)
	if r.Status != 200 || drained.Node.Draining || drained.Node.DrainRequestedBy != nil {
		t.Fatalf("undrain: %s", r)
	}
	if env.State("r") != wire.Running {
		t.Fatalf("r is %s once A's drain was lifted", env.State("r"))
	}
	env.CheckInvariants()
}

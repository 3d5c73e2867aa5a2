package httpapi_test

// A flaky node among identical ones costs at most NODE_QUARANTINE_AFTER runs: its agents are
// goroutines driving the real handlers, with nothing but heartbeats and reports moving the
// fleet, and runs arriving while they work.

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// flakyFleet is five identical nodes; flaky fails every step it runs with an infrastructure
// failure, the others succeed.
var (
	flakyFleet = []string{"n1", "n2", "n3", "n4", "n5"}
	flaky      = "n3"
)

const (
	flakyRuns = 50
	// flakyRounds bounds the heartbeats of all agents together: far more than 50 one-step runs
	// need, so reaching it means the fleet stopped making progress.
	flakyRounds = 20000
)

// agentLog is what the agents saw: the runs each node reported failed, and how many runs
// their reports ended.
type agentLog struct {
	mu     sync.Mutex
	failed map[string][]string // node → runs it failed
	ended  atomic.Int32
	rounds atomic.Int32
}

// playAgent is node's agent: heartbeat, run each runnable step it is handed to the end (failed
// with failure infra on the flaky node, succeeded elsewhere), again, until every run ended or
// the rounds ran out. It reports a failure of the API with t.Error, never t.Fatal: it is not the
// test's goroutine.
func playAgent(t *testing.T, env *apitest.Env, node string, log *agentLog) {
	boot := "boot-" + node
	for int(log.ended.Load()) < flakyRuns && log.rounds.Add(1) <= flakyRounds {
		resp := env.Do(apitest.Node(node), "PUT", "/v1/nodes/"+node, map[string]any{"boot_id": boot, "labels": []string{"board"}})
		if resp.Status == 503 {
			continue // the pool was busy: an agent tries again
		}
		if resp.Status != 200 {
			t.Errorf("heartbeat of %s: %s", node, resp)
			return
		}
		var beat apitest.Beat
		if !decodeIn(t, resp, &beat) {
			return
		}
		ran := false
		for _, st := range beat.Steps {
			if !st.Runnable || beat.Lease == nil || st.RunID != beat.Lease.RunID {
				continue
			}
			if !runStep(t, env, node, boot, beat.Lease.Epoch, st, log) {
				return
			}
			ran = true
		}
		if !ran {
			runtime.Gosched() // nothing to do: let the busy agents have the processor
		}
	}
}

// runStep reports st started, then ended as node's agent ends it. False: the API failed.
func runStep(t *testing.T, env *apitest.Env, node, boot string, epoch int64, st store.NodeStep, log *agentLog) bool {
	target := "/v1/runs/" + st.RunID + "/steps/" + st.StepID + "/result"
	started := map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": wire.ReportStarted}
	ended := map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": wire.ReportSucceeded, "exit_code": 0}
	if node == flaky {
		ended = map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "status": wire.ReportFailed, "exit_code": 1,
			"failure": wire.FailureInfra, "message": "the USB hub dropped the board"}
	}
	for _, report := range []map[string]any{started, ended} {
		var resp apitest.Response
		for range 20 {
			if resp = env.Do(apitest.Node(node), "POST", target, report); resp.Status != 503 {
				break
			}
		}
		if resp.Status != 200 {
			t.Errorf("%s reporting %s of %s: %s", node, report["status"], st.RunID, resp)
			return false
		}
		var answer struct {
			RunState string `json:"run_state"`
		}
		if !decodeIn(t, resp, &answer) {
			return false
		}
		if report["status"] == wire.ReportStarted {
			continue
		}
		if report["status"] == wire.ReportFailed {
			log.mu.Lock()
			log.failed[node] = append(log.failed[node], st.RunID)
			log.mu.Unlock()
		}
		if wire.Final(answer.RunState) {
			log.ended.Add(1)
		}
	}
	return true
}

// decodeIn reads an answer's body into v from an agent's goroutine: a failure is the test's
// error, and false.
func decodeIn(t *testing.T, resp apitest.Response, v any) bool {
	if err := json.Unmarshal(resp.Body, v); err != nil {
		t.Errorf("an answer that is not JSON (%v): %s", err, resp.Body)
		return false
	}
	return true
}

// submitRuns submits the runs ids as alice, each one step on any "board", one after another.
func submitRuns(t *testing.T, env *apitest.Env, ids []string) {
	for _, id := range ids {
		var resp apitest.Response
		for range 20 {
			if resp = env.Do(alice, "POST", "/v1/runs", oneNodeRun(id, "board")); resp.Status != 503 {
				break
			}
		}
		if resp.Status != 201 && resp.Status != 202 {
			t.Errorf("submit %s: %s", id, resp)
		}
	}
}

// A flaky node among five identical ones that fails every run with infra: over 50 runs, at
// most NODE_QUARANTINE_AFTER (3) runs fail because of it. The system quarantines it, the four
// others stay healthy and run the rest, and no run fails anywhere else.
func TestAFlakyNodeCostsAtMostQuarantineAfterRuns(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(8))
	if env.Config.QuarantineAfter != 3 {
		t.Fatalf("NODE_QUARANTINE_AFTER is %d; the case is written for 3", env.Config.QuarantineAfter)
	}
	for _, node := range flakyFleet {
		if resp, _ := env.Beat(node, "boot-"+node, false, "board"); resp.Status != 200 {
			t.Fatalf("first heartbeat of %s: %s", node, resp)
		}
	}
	ids := make([]string, flakyRuns)
	for i := range ids {
		ids[i] = fmt.Sprintf("flaky-%02d", i)
	}
	// Thirty arrive at once before the agents start, so that the queue is long while the
	// flaky node counts its failures; twenty more arrive while the agents work.
	var submits sync.WaitGroup
	for part := range slices.Chunk(ids[:30], 10) {
		submits.Go(func() { submitRuns(t, env, part) })
	}
	submits.Wait()
	log := &agentLog{failed: map[string][]string{}}
	var agents sync.WaitGroup
	for _, node := range flakyFleet {
		agents.Go(func() { playAgent(t, env, node, log) })
	}
	for part := range slices.Chunk(ids[30:], 5) {
		submits.Go(func() { submitRuns(t, env, part) })
	}
	submits.Wait()
	agents.Wait()
	if t.Failed() {
		t.FailNow()
	}

	if ended := int(log.ended.Load()); ended != flakyRuns {
		t.Fatalf("%d of %d runs ended within %d heartbeats", ended, flakyRuns, flakyRounds)
	}
	failed := 0
	for _, id := range ids {
		switch state := env.State(id); state {
		case wire.Failed:
			failed++
		case wire.Succeeded:
		default:
			t.Errorf("run %s is %s, not ended", id, state)
		}
	}
	if n := len(log.failed[flaky]); n > env.Config.QuarantineAfter || n != failed {
		t.Errorf("the flaky node failed %d runs (%v), %d failed in all; want at most %d, all of them its",
			n, log.failed[flaky], failed, env.Config.QuarantineAfter)
	}
	for node, runs := range log.failed {
		if node != flaky {
			t.Errorf("%s, a healthy node, failed %v", node, runs)
		}
	}
	// The history agrees: every failed run was leased to the flaky node.
	if n := env.Count(`SELECT count(*) FROM runs r WHERE r.run_id LIKE 'flaky-%' AND r.state = $1
		AND NOT EXISTS (SELECT 1 FROM node_history h WHERE h.kind = 'lease' AND h.run_id = r.run_id AND h.node_id = $2)`,
		wire.Failed, flaky); n != 0 {
		t.Errorf("%d failed runs never ran on the flaky node", n)
	}
	for _, node := range flakyFleet {
		n := nodeDetail(t, env, node).Node
		switch {
		case node == flaky:
			if n.Health != wire.HealthQuarantined || n.QuarantinedBy == nil || *n.QuarantinedBy != wire.QuarantinedBySystem {
				t.Errorf("the flaky node ends %s by %v, want quarantined by system", n.Health, n.QuarantinedBy)
			}
		case n.Health != wire.HealthHealthy || n.InfraFailures != 0:
			t.Errorf("%s ends %s with %d infrastructure failures, want healthy", node, n.Health, n.InfraFailures)
		}
	}
	env.CheckInvariants()
}

// nodeDetail is GET /v1/nodes/{node_id}, as an admin.
func nodeDetail(t *testing.T, env *apitest.Env, node string) store.NodeDetail {
	t.Helper()
	resp := env.Do(apitest.Admin, "GET", "/v1/nodes/"+node, nil)
	if resp.Status != 200 {
		t.Fatalf("GET node %s: %s", node, resp)
	}
	var d store.NodeDetail
	resp.Decode(t, &d)
	return d
}

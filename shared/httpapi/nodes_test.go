package httpapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// A new node's first heartbeat registers it and promotes the queued run that needed it; the
// second, identical heartbeat promotes nothing and does not wake the queue: it is one
// statement, the heartbeat itself.
func TestFirstHeartbeatWakesSecondDoesNot(t *testing.T) {
	t.Parallel()
	var counter pgcount.Counter
	env := apitest.New(t, apitest.Tracer(&counter))
	run := oneNodeRun("r", "board=rpi4")
	run["wait_for_capacity"] = true
	env.Do(alice, "POST", "/v1/runs", run)

	resp, beat := env.Beat("A", "boot-1", false, "board=rpi4")
	if resp.Status != 200 || beat.Lease == nil || beat.Lease.RunID != "r" || len(beat.Steps) != 0 {
		// The wake runs after the heartbeat's commit: the lease shows on the next heartbeat.
		if resp.Status != 200 || beat.Lease != nil {
			t.Fatalf("first heartbeat: %s", resp)
		}
	}
	if env.State("r") != wire.Running {
		t.Fatalf("the queued run was not promoted by the first heartbeat: %s", env.State("r"))
	}
	before := counter.Read()
	resp, beat = env.Beat("A", "boot-1", false, "board=rpi4")
	if resp.Status != 200 || beat.Lease == nil || beat.Lease.RunID != "r" || len(beat.Steps) != 1 || !beat.Steps[0].Runnable {
		t.Fatalf("second heartbeat: %s", resp)
	}
	if q := counter.Read().Since(before).Queries; q != 1 {
		t.Fatalf("a routine heartbeat sent %d statements; want 1 (no wake)", q)
	}
	if beat.NextHeartbeatSeconds != 20 {
		t.Fatalf("next_heartbeat_seconds %d, want LEASE_TTL/3 = 20", beat.NextHeartbeatSeconds)
	}
}

// Under the same boot the heartbeat renews the lease.
func TestHeartbeatRenewsTheLease(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
	env.Exec(`UPDATE leases SET expires_at = now() + interval '1 second'`)
	_, beat := env.Beat("A", "boot-1", false, "board")
	if beat.Lease == nil || env.Count(`SELECT count(*) FROM leases WHERE expires_at > now() + interval '50 seconds'`) != 1 {
		t.Fatalf("lease not renewed: %+v", beat.Lease)
	}
}

// A heartbeat under a new boot is a restart: the old lease is released at once, and the run is
// requeued in its original place (attempts left) or FAILED node_restarted (none left).
func TestRestartReleasesTheLease(t *testing.T) {
	t.Parallel()
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprint("max_attempts=", attempts), func(t *testing.T) {
			t.Parallel()
			env := apitest.New(t)
			env.Beat("A", "boot-1", false, "board")
			run := oneNodeRun("r", "board")
			run["max_attempts"] = attempts
			env.Do(alice, "POST", "/v1/runs", run)
			env.Do(alice, "POST", "/v1/runs", oneNodeRun("later", "board"))
			// The node comes back draining, so no wake moves anything: the queue is as the
			// restart left it.
			resp, beat := env.Beat("A", "boot-2", true, "board")
			if resp.Status != 200 || beat.Lease != nil || len(beat.Steps) != 0 {
				t.Fatalf("restart heartbeat: %s", resp)
			}
			got := env.Do(alice, "GET", "/v1/runs/r", nil)
			var body struct {
				Run store.Run `json:"run"`
			}
			got.Decode(t, &body)
			switch attempts {
			case 1:
				if body.Run.State != wire.Failed || *body.Run.Reason != wire.ReasonNodeRestarted {
					t.Fatalf("no attempts left: %s", got)
				}
			case 2:
				if body.Run.State != wire.Queued || body.Run.Attempt != 2 || *body.Run.QueuePosition != 0 || body.Run.Roles["main"].NodeID != "" {
					t.Fatalf("requeued: %s", got)
				}
				// Drain lifted: capacity appeared, and the requeued run goes first.
				env.Beat("A", "boot-2", false, "board")
				if env.State("r") != wire.Running || env.State("later") != wire.Queued {
					t.Fatalf("after the drain: r %s, later %s", env.State("r"), env.State("later"))
				}
			}
			env.CheckInvariants()
		})
	}
}

// A draining node keeps its lease but gets no new run; lifting the drain promotes the queued run.
func TestDrain(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("held", "board"))
	held := env.Count(`SELECT count(*) FROM leases WHERE run_id = 'held' AND node_id = 'A'`) == 1
	drained := "A"
	if !held {
		drained = "B"
	}
	_, beat := env.Beat(drained, "boot-1", true, "board")
	if beat.Lease == nil || beat.Node.State != "leased" {
		t.Fatalf("a draining node keeps its lease: %+v", beat)
	}
	other := map[string]string{"A": "B", "B": "A"}[drained]
	env.Beat(other, "boot-1", true, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("waiting", "board"))
	if env.State("waiting") != wire.Queued {
		t.Fatalf("a run was placed on a draining node: %s", env.State("waiting"))
	}
	env.Beat(other, "boot-1", false, "board")
	if env.State("waiting") != wire.Running {
		t.Fatalf("lifting the drain did not promote the queued run: %s", env.State("waiting"))
	}
}

func TestNodeRoutesBelongToTheNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	body := map[string]any{"boot_id": "b", "labels": []string{}}
	if resp := env.Do(apitest.Node("B"), "PUT", "/v1/nodes/A", body); resp.Status != 403 {
		t.Fatalf("node B as node A: %s", resp)
	}
	if resp := env.Do(alice, "PUT", "/v1/nodes/A", body); resp.Status != 403 {
		t.Fatalf("a client heartbeating: %s", resp)
	}
	if resp := env.Do(apitest.Node("A"), "DELETE", "/v1/nodes/A", nil); resp.Status != 403 {
		t.Fatalf("a node removing itself: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "PUT", "/v1/nodes/A", body); resp.Status != 200 {
		t.Fatalf("admin heartbeating for A: %s", resp)
	}
	if resp := env.Do(alice, "GET", "/v1/nodes", nil); resp.Status != 403 {
		t.Fatalf("a client reading the fleet: %s", resp)
	}
	if resp := env.Do(apitest.Node("A"), "PUT", "/v1/nodes/A", map[string]any{"boot_id": "b", "labels": []string{"bad label"}}); resp.Status != 400 {
		t.Fatalf("a bad label: %s", resp)
	}
}

// Removing a node: its run loses it (node_removed), and a queued run only it could serve fails
// no_capable_node, unless it asked to wait for capacity.
func TestRemoveNode(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board", "gpu")
	env.Beat("B", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("on-a", "gpu"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("needs-gpu", "gpu"))
	elastic := oneNodeRun("elastic", "gpu")
	elastic["wait_for_capacity"] = true
	env.Do(alice, "POST", "/v1/runs", elastic)
	resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/A", nil)
	var body struct {
		Released   int `json:"released"`
		RunsFailed int `json:"runs_failed"`
	}
	resp.Decode(t, &body)
	if resp.Status != 200 || body.Released != 1 || body.RunsFailed != 1 {
		t.Fatalf("remove A: %s", resp)
	}
	checks := map[string]string{"on-a": wire.ReasonNodeRemoved, "needs-gpu": wire.ReasonNoCapableNode}
	for run, reason := range checks {
		var got struct {
			Run store.Run `json:"run"`
		}
		env.Do(alice, "GET", "/v1/runs/"+run, nil).Decode(t, &got)
		if got.Run.State != wire.Failed || *got.Run.Reason != reason {
			t.Errorf("%s: %s %v, want FAILED %s", run, got.Run.State, got.Run.Reason, reason)
		}
	}
	if env.State("elastic") != wire.Queued {
		t.Errorf("elastic: %s", env.State("elastic"))
	}
	if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/A", nil); resp.Status != 404 {
		t.Fatalf("removing it again: %s", resp)
	}
	env.CheckInvariants()
}

func TestFleetViews(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Beat("B", "boot-1", true, "board")
	env.Beat("C", "boot-1", false, "board")
	env.Exec(`UPDATE nodes SET advert_expires_at = now() - interval '1 second' WHERE node_id = 'C'`)
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
	var nodes struct {
		Nodes []store.Node `json:"nodes"`
	}
	env.Do(apitest.Admin, "GET", "/v1/nodes", nil).Decode(t, &nodes)
	states := map[string]string{}
	for _, n := range nodes.Nodes {
		states[n.NodeID] = n.State
	}
	if states["A"] != "leased" || states["B"] != "draining" || states["C"] != "offline" {
		t.Fatalf("states %v", states)
	}
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second'`)
	var leases struct {
		Leases []store.Lease `json:"leases"`
	}
	env.Do(apitest.Admin, "GET", "/v1/leases", nil).Decode(t, &leases)
	if len(leases.Leases) != 1 || leases.Leases[0].RunID != "r" || leases.Leases[0].Alive || leases.Leases[0].Epoch == 0 {
		t.Fatalf("leases %+v", leases.Leases)
	}
}

// 30 goroutines heartbeat 10 nodes, some restarting, while 10 submit runs: afterwards no lease
// is held under a boot that is not its node's current boot, and every invariant holds.
func TestHeartbeatsAndSubmitsConcurrently(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(40))
	for i := range 10 {
		env.Beat(fmt.Sprintf("n%d", i), "boot-1", false, "board")
	}
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 20 {
				node := fmt.Sprintf("n%d", rng.IntN(10))
				boot := "boot-1"
				if rng.IntN(5) == 0 {
					boot = fmt.Sprintf("boot-%d-%d", g, i)
				}
				resp := env.Do(apitest.Node(node), "PUT", "/v1/nodes/"+node, map[string]any{"boot_id": boot, "labels": []string{"board"}})
				if resp.Status != 200 {
					t.Errorf("heartbeat: %s", resp)
				}
			}
		}()
	}
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				run := oneNodeRun(fmt.Sprintf("r-%d-%d", g, i), "board")
				run["max_attempts"] = 3
				resp := env.Do(alice, "POST", "/v1/runs", run)
				if resp.Status != 201 && resp.Status != 202 {
					t.Errorf("submit: %s", resp)
				}
			}
		}()
	}
	wg.Wait()
	env.CheckInvariants()
}

// A node that restarts draining frees its run-mates all the same: before its heartbeat
// returns, a run queued for a run-mate's node is running there. The wake must not wait for the
// restarting node itself to be available, or the run waits for the reaper's stranded-run
// detector.
func TestDrainingRestartWakesForTheRunMates(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "dut")
	env.Beat("B", "boot-1", false, "host")
	pair := map[string]any{
		"run_id": "pair", "roles": map[string]any{"dut": map[string]any{"needs": []string{"dut"}}, "host": map[string]any{"needs": []string{"host"}}},
		"steps": []map[string]any{{"id": "flash", "role": "host"}, {"id": "test", "role": "dut", "after": []string{"flash"}}},
	}
	if resp := env.Do(alice, "POST", "/v1/runs", pair); resp.Status != 201 {
		t.Fatalf("pair: %s", resp)
	}
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("solo", "host")); resp.Status != 202 {
		t.Fatalf("solo: %s", resp)
	}
	env.Beat("A", "boot-2", true, "dut")
	if env.State("solo") != wire.Running || env.Count(`SELECT count(*) FROM leases WHERE node_id = 'B' AND run_id = 'solo'`) != 1 {
		t.Fatalf("solo is %s; B, freed by A's restart, was left idle", env.State("solo"))
	}
	env.CheckInvariants()
}

// When one node of a two-role run restarts, the other node learns from its next heartbeat
// that its steps are no longer its own.
func TestRunMateLearnsOfTheRestart(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "dut")
	env.Beat("B", "boot-1", false, "host")
	resp := env.Do(alice, "POST", "/v1/runs", map[string]any{
		"run_id": "pair", "roles": map[string]any{"dut": map[string]any{"needs": []string{"dut"}}, "host": map[string]any{"needs": []string{"host"}}},
		"steps": []map[string]any{{"id": "flash", "role": "host"}, {"id": "test", "role": "dut", "after": []string{"flash"}}},
	})
	if resp.Status != 201 {
		t.Fatalf("pair: %s", resp)
	}
	if _, beat := env.Beat("B", "boot-1", false, "host"); beat.Lease == nil || len(beat.Steps) != 1 || !beat.Steps[0].Runnable {
		t.Fatalf("B before: %+v", beat)
	}
	if _, beat := env.Beat("A", "boot-1", false, "dut"); len(beat.Steps) != 1 || beat.Steps[0].Runnable {
		t.Fatalf("A's test waits for flash: %+v", beat)
	}
	env.Beat("A", "boot-2", false, "dut")
	if _, beat := env.Beat("B", "boot-1", false, "host"); beat.Lease != nil || len(beat.Steps) != 0 {
		t.Fatalf("B still holds the run's steps: %+v", beat)
	}
	if n := env.Count(`SELECT count(*) FROM run_events WHERE run_id = 'pair' AND kind = 'node_lost' AND reason = 'node_restarted' AND node_id = 'A'`); n != 1 {
		t.Fatalf("node_lost events: %d", n)
	}
	env.CheckInvariants()
}

// A node that heartbeats again within a second writes nothing — not its advert, not its lease —
// so polling for work costs reads, not commits; past that, the heartbeat renews both.
func TestFastHeartbeatsWriteNothing(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Beat("A", "boot-1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "board"))
	version := func() string {
		var v string
		_ = env.Store.Pool().QueryRow(context.Background(),
			`SELECT n.xmin::text || '/' || l.xmin::text FROM nodes n JOIN leases l USING (node_id) WHERE node_id = 'A'`).Scan(&v)
		return v
	}
	// Renewed "just now", as far as any clock can tell: the test does not race the one second.
	env.Exec(`UPDATE nodes SET advert_expires_at = now() + interval '1 hour'`)
	env.Exec(`UPDATE leases SET expires_at = now() + interval '1 hour'`)
	before := version()
	for range 3 {
		if _, beat := env.Beat("A", "boot-1", false, "board"); beat.Lease == nil || len(beat.Steps) != 1 {
			t.Fatalf("a fast heartbeat lost the node's work: %+v", beat)
		}
	}
	if after := version(); after != before {
		t.Fatalf("fast heartbeats wrote the node or its lease: %s -> %s", before, after)
	}
	// Renewed half a TTL ago (written, not slept): the next heartbeat renews both.
	env.Exec(`UPDATE nodes SET advert_expires_at = now() + interval '30 seconds'`)
	env.Exec(`UPDATE leases SET expires_at = now() + interval '30 seconds'`)
	before = version()
	env.Beat("A", "boot-1", false, "board")
	if env.Count(`SELECT count(*) FROM leases WHERE expires_at > now() + interval '50 seconds'`) != 1 || version() == before {
		t.Fatal("a heartbeat past the slack did not renew the lease")
	}
	// A changed advert is written at once, slack or not.
	env.Beat("A", "boot-1", true, "board")
	if env.Count(`SELECT count(*) FROM nodes WHERE draining`) != 1 {
		t.Fatal("a drain within the slack was not written")
	}
}

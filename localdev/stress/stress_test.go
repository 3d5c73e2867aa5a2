// Package stress drives Mediator's real handlers from many goroutines at once against real
// PostgreSQL, then checks that nothing was lost, no node was held twice, and no queued run was
// left next to a free node. `make test` runs it at CI size; `make stress` with -long.
package stress

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/config"
	"mediator/shared/store"
	"mediator/shared/wire"
)

var long = flag.Bool("long", false, "run the long stress (make stress)")

// size is how much each kind of actor does.
type size struct {
	nodes, submitters, runsEach, cancellers, reapers, restarters int
}

func sizeFor() size {
	if *long {
		return size{nodes: 24, submitters: 12, runsEach: 250, cancellers: 4, reapers: 3, restarters: 2}
	}
	return size{nodes: 12, submitters: 6, runsEach: 40, cancellers: 2, reapers: 2, restarters: 1}
}

// labelsOf gives the fleet three kinds of node.
func labelsOf(i int) []string {
	switch i % 4 {
	case 0, 1:
		return []string{"board"}
	case 2:
		return []string{"board", "usb"}
	default:
		return []string{"gpu"}
	}
}

// world is what the actors share and what the checks read afterwards.
type world struct {
	env      *apitest.Env
	size     size
	accepted sync.Map // run_id → the request body that was accepted
	failures atomic.Int64
	mu       sync.Mutex
	problems []string
	stop     atomic.Bool
}

func (w *world) fail(format string, args ...any) {
	w.failures.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) < 30 {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

// expect records an unexpected answer; a 5xx is always one.
func (w *world) expect(what string, resp apitest.Response, ok ...int) {
	for _, s := range ok {
		if resp.Status == s {
			return
		}
	}
	w.fail("%s: %s", what, resp)
}

func TestStress(t *testing.T) {
	t.Parallel()
	sz := sizeFor()
	// A starvation bound of a second makes most queued runs protected while they wait, so the
	// cancellers take protected runs out of the queue too: the nodes they held must be woken for.
	env := apitest.New(t, apitest.PoolSize(48), apitest.Configure(func(c *config.Config) { c.Starvation = time.Second }))
	w := &world{env: env, size: sz}
	for i := range sz.nodes {
		env.Beat(fmt.Sprintf("node-%02d", i), "boot-0", false, labelsOf(i)...)
	}
	began := time.Now()

	var actors, background sync.WaitGroup
	for g := range sz.submitters {
		actors.Add(1)
		go func() { defer actors.Done(); w.submitter(g) }()
	}
	for g := range sz.cancellers {
		actors.Add(1)
		go func() { defer actors.Done(); w.canceller(g) }()
	}
	agents := make([]*agent, sz.nodes)
	for i := range agents {
		agents[i] = &agent{w: w, id: fmt.Sprintf("node-%02d", i), boot: "boot-0", labels: labelsOf(i), rng: rand.New(rand.NewPCG(uint64(i), 99))}
		background.Add(1)
		go func() { defer background.Done(); agents[i].run() }()
	}
	for g := range sz.restarters {
		background.Add(1)
		go func() { defer background.Done(); w.restarter(g) }()
	}
	for g := range sz.reapers {
		background.Add(1)
		go func() { defer background.Done(); w.reaper(g) }()
	}
	background.Add(1)
	go func() { defer background.Done(); w.watch() }()

	actors.Wait()
	w.stop.Store(true)
	background.Wait()
	w.drain(t, agents)
	t.Logf("stress: %d runs submitted in %v", w.count(), time.Since(began).Round(time.Millisecond))

	w.logMix(t)
	for _, p := range w.problems {
		t.Error(p)
	}
	w.checkAccepted(t)
	w.checkQueueOrder(t)
	env.CheckInvariants()
	if res := env.Wake(); res.Promoted != 0 {
		t.Errorf("after everything returned, a wake still promoted %d runs: they were stranded", res.Promoted)
	}
}

func (w *world) count() int {
	n := 0
	w.accepted.Range(func(any, any) bool { n++; return true })
	return n
}

// submitter sends a mix: ordinary runs, two-role runs, impossible ones (some waiting for
// capacity), too-wide ones, duplicates of its own earlier runs, and conflicting reuses of an id.
func (w *world) submitter(g int) {
	rng := rand.New(rand.NewPCG(uint64(g), 1))
	var mine []string
	client := apitest.Client(fmt.Sprintf("client-%d", g%3))
	for i := range w.size.runsEach {
		switch roll := rng.IntN(20); {
		case roll < 2 && len(mine) > 0: // the same request again: 200
			id := mine[rng.IntN(len(mine))]
			body, _ := w.accepted.Load(id)
			w.expect("resubmit "+id, w.env.Do(client, "POST", "/v1/runs", body), 200)
		case roll < 3 && len(mine) > 0: // the same id, another request: 409
			id := mine[rng.IntN(len(mine))]
			other := run(id, []string{"board"}, 1, 0, 1)
			other["metadata"] = map[string]any{"differs": true}
			w.expect("conflicting resubmit "+id, w.env.Do(client, "POST", "/v1/runs", other), 409)
		default:
			id := fmt.Sprintf("s%d-%03d", g, i)
			body, want := w.pick(rng, id)
			body["priority"] = rng.IntN(51) // mixed: the most a client may give is 50
			resp := w.env.Do(client, "POST", "/v1/runs", body)
			w.expect("submit "+id, resp, want...)
			if resp.Status < 300 || resp.Status == 422 {
				w.accepted.Store(id, body)
				mine = append(mine, id)
			}
			switch rng.IntN(10) { // cancel some while they are still live
			case 0:
				w.expect("cancel "+id, w.env.Do(client, "POST", "/v1/runs/"+id+"/cancel", map[string]any{"reason": "stress"}), 200, 202, 409)
			case 1:
				w.expect("force "+id, w.env.Do(apitest.Admin, "POST", "/v1/runs/"+id+"/cancel", map[string]any{"force": true}), 200, 409)
			}
		}
	}
}

// pick chooses what kind of run to submit, and which answers are right for it.
func (w *world) pick(rng *rand.Rand, id string) (map[string]any, []int) {
	attempts := 1 + rng.IntN(3)
	retries := rng.IntN(2)
	switch roll := rng.IntN(20); {
	case roll < 2:
		return run(id, []string{"fpga"}, 1, retries, attempts), []int{422}
	case roll < 3:
		r := run(id, []string{"fpga"}, 1, retries, attempts)
		r["wait_for_capacity"] = true
		return r, []int{202}
	case roll < 4:
		return wide(id), []int{422}
	case roll < 8:
		return pair(id, attempts), []int{201, 202}
	case roll < 10:
		return run(id, []string{"gpu"}, 1+rng.IntN(2), retries, attempts), []int{201, 202}
	default:
		return run(id, []string{"board"}, 1+rng.IntN(3), retries, attempts), []int{201, 202}
	}
}

func run(id string, needs []string, steps, retries, attempts int) map[string]any {
	var list []map[string]any
	for i := range steps {
		st := map[string]any{"id": fmt.Sprintf("s%d", i), "retries": retries}
		if i > 0 {
			st["after"] = []string{fmt.Sprintf("s%d", i-1)}
		}
		list = append(list, st)
	}
	return map[string]any{"run_id": id, "needs": needs, "steps": list, "max_attempts": attempts}
}

func pair(id string, attempts int) map[string]any {
	return map[string]any{
		"run_id": id, "max_attempts": attempts,
		"roles": map[string]any{"dut": map[string]any{"needs": []string{"board"}}, "host": map[string]any{"needs": []string{"usb"}}},
		"steps": []map[string]any{{"id": "flash", "role": "host"}, {"id": "test", "role": "dut", "after": []string{"flash"}, "retries": 1}},
	}
}

func wide(id string) map[string]any {
	roles := map[string]any{}
	var steps []map[string]any
	for i := range 17 {
		roles[fmt.Sprintf("r%d", i)] = map[string]any{"needs": []string{"board"}}
		steps = append(steps, map[string]any{"id": fmt.Sprintf("s%d", i), "role": fmt.Sprintf("r%d", i)})
	}
	return map[string]any{"run_id": id, "roles": roles, "steps": steps}
}

// canceller cancels runs it did not submit itself: owners get 200/202/409; others' runs 404;
// an admin sometimes forces.
func (w *world) canceller(g int) {
	rng := rand.New(rand.NewPCG(uint64(g), 2))
	for i := 0; i < w.size.runsEach*w.size.submitters/10; i++ {
		var ids []string
		w.accepted.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return len(ids) < 500 })
		if len(ids) == 0 {
			continue
		}
		id := ids[rng.IntN(len(ids))]
		var owner int
		fmt.Sscanf(id, "s%d-", &owner)
		who, body, ok := apitest.Client(fmt.Sprintf("client-%d", owner%3)), map[string]any{"reason": "stress"}, []int{200, 202, 409}
		switch rng.IntN(4) {
		case 0:
			who, body = apitest.Admin, map[string]any{"force": true}
		case 1:
			who, ok = apitest.Client("stranger"), []int{404}
		}
		w.expect("cancel "+id, w.env.Do(who, "POST", "/v1/runs/"+id+"/cancel", body), ok...)
	}
}

// reaper sweeps, through the reap function's handler, until told to stop.
func (w *world) reaper(int) {
	for !w.stop.Load() {
		if _, err := w.env.Store.Reap(context.Background(), store.ReapParams{}); err != nil {
			w.fail("reap: %v", err)
		}
	}
}

// restarter restarts one node several times at the same moment, under new boot ids, as an
// agent crash-looping under a supervisor would: every restart must answer 200, and the runs
// queued for the node must not be left beside it.
func (w *world) restarter(g int) {
	rng := rand.New(rand.NewPCG(uint64(g), 3))
	for n := 0; !w.stop.Load(); n++ {
		i := rng.IntN(w.size.nodes)
		node := fmt.Sprintf("node-%02d", i)
		var wg sync.WaitGroup
		for b := range 2 + rng.IntN(2) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp := w.env.Do(apitest.Node(node), "PUT", "/v1/nodes/"+node,
					map[string]any{"boot_id": fmt.Sprintf("crash-%d-%d-%d", g, n, b), "labels": labelsOf(i)})
				w.expect("restart "+node, resp, 200)
			}()
		}
		wg.Wait()
	}
}

// watch checks the invariants over and over while everything runs: a reader only ever sees
// committed states, so a violation seen at any moment is a failure, not only one left at the end.
func (w *world) watch() {
	for !w.stop.Load() {
		for _, broken := range w.env.Invariants() {
			w.fail("while running: %s", broken)
		}
	}
}

// drain: the actors have stopped; the test itself now plays every node, well-behaved, round
// after round with a reap between, until nothing runs and nothing placeable waits. Each round
// does real work, so no round waits on a clock; a bound on the rounds catches a fleet that
// cannot drain.
func (w *world) drain(t *testing.T, agents []*agent) {
	stranded := 0
	for round := range 200 {
		running := w.env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING'`)
		placeable := w.env.Count(`SELECT count(*) FROM runs r WHERE r.state = 'QUEUED' AND NOT EXISTS (
			SELECT 1 FROM run_roles ro WHERE ro.run_id = r.run_id AND 'fpga' = ANY (ro.needs))`)
		if running == 0 && placeable == 0 {
			t.Logf("drained in %d rounds", round)
			if stranded > 0 {
				// Every handler had returned before each of these reaps: a run the detector
				// placed was left beside a free node by a write that did not wake for it.
				t.Errorf("the reaper's stranded-run detector recovered %d runs while the fleet drained: lost wakeups", stranded)
			}
			return
		}
		for _, a := range agents {
			a.calm = true
			a.beat()
		}
		stranded += w.env.Reap().Stranded
	}
	w.dump(t, `SELECT r.run_id || ' ' || r.state || ' attempt ' || r.attempt || ' cancel ' || coalesce(r.cancel_requested_at::text, '-')
		|| ' steps ' || (SELECT string_agg(s.step_id || ':' || s.role || ':' || s.state, ' ') FROM steps s WHERE s.run_id = r.run_id)
		|| ' roles ' || (SELECT string_agg(ro.role || '@' || ro.node_id, ' ') FROM run_roles ro WHERE ro.run_id = r.run_id)
		|| ' leases ' || coalesce((SELECT string_agg(l.node_id || '/' || l.role || '/' || l.boot_id, ' ') FROM leases l WHERE l.run_id = r.run_id), '-')
		FROM runs r WHERE r.state IN ('RUNNING', 'QUEUED') AND NOT EXISTS (
			SELECT 1 FROM run_roles ro WHERE ro.run_id = r.run_id AND 'fpga' = ANY (ro.needs)) LIMIT 10`)
	w.dump(t, `SELECT node_id || ' ' || boot_id || ' draining ' || draining || ' live ' || (advert_expires_at > now()) FROM nodes`)
	t.Fatalf("the fleet did not drain: %d running, %d queued", w.env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING'`),
		w.env.Count(`SELECT count(*) FROM runs WHERE state = 'QUEUED'`))
}

func (w *world) dump(t *testing.T, sql string) {
	rows, err := w.env.Store.Pool().Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		_ = rows.Scan(&line)
		t.Log(line)
	}
}

// agent is a node: it heartbeats, runs what it is given, and misbehaves on purpose now and
// then — restarts, drains, stale reports, reports out of order, dies (its lease expires).
type agent struct {
	w      *world
	id     string
	boot   string
	labels []string
	rng    *rand.Rand
	gen    int
	calm   bool // no more misbehaving: the drain
}

func (a *agent) run() {
	for !a.w.stop.Load() {
		a.beat()
	}
}

func (a *agent) beat() {
	env := a.w.env
	draining := false
	roll := a.rng.IntN(100)
	if a.calm {
		roll = 100
	}
	switch {
	case roll < 2: // restart
		a.gen++
		a.boot = fmt.Sprintf("boot-%d", a.gen)
	case roll < 4: // drain for one beat
		draining = true
	case roll < 5: // die: the lease expires unrenewed, and a reap takes it before the node is back
		env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second' WHERE node_id = $1`, a.id)
		if _, err := env.Store.Reap(context.Background(), store.ReapParams{}); err != nil {
			a.w.fail("reap after %s died: %v", a.id, err)
		}
		return
	}
	resp := env.Do(apitest.Node(a.id), "PUT", "/v1/nodes/"+a.id, map[string]any{"boot_id": a.boot, "labels": a.labels, "draining": draining})
	if resp.Status != 200 {
		a.w.fail("heartbeat %s: %s", a.id, resp)
		return
	}
	var beat apitest.Beat
	if err := json.Unmarshal(resp.Body, &beat); err != nil || beat.Lease == nil {
		return
	}
	for _, st := range beat.Steps {
		if st.Runnable {
			a.work(beat.Lease.Epoch, st)
		} else if st.Cancel && st.State == wire.Running {
			a.report(beat.Lease.Epoch, st, "cancelled", 200, 409)
		}
	}
}

func (a *agent) work(epoch int64, st store.NodeStep) {
	if !a.calm && a.rng.IntN(20) == 0 { // a stale epoch: refused, nothing changes
		a.report(epoch+1_000_000, st, "started", 409)
	}
	if !a.calm && a.rng.IntN(30) == 0 { // finishing before starting: refused
		a.report(epoch, st, "succeeded", 409)
	}
	if !a.report(epoch, st, "started", 200, 409) {
		return
	}
	outcome := "succeeded"
	if a.rng.IntN(6) == 0 {
		outcome = "failed"
	}
	a.report(epoch, st, outcome, 200, 409)
}

// report sends one step report; 409 is right whenever the run moved on under the node.
func (a *agent) report(epoch int64, st store.NodeStep, status string, ok ...int) bool {
	report := map[string]any{"node_id": a.id, "boot_id": a.boot, "epoch": epoch, "status": status}
	if status != "started" { // a started step has not exited
		report["exit_code"] = 0
	}
	resp := a.w.env.Do(apitest.Node(a.id), "POST", "/v1/runs/"+st.RunID+"/steps/"+st.StepID+"/result", report)
	a.w.expect(fmt.Sprintf("%s %s %s/%s", a.id, status, st.RunID, st.StepID), resp, ok...)
	return resp.Status == 200
}

// logMix says what the stress actually exercised, so a quiet run is seen to be a real one.
func (w *world) logMix(t *testing.T) {
	rows, err := w.env.Store.Pool().Query(context.Background(), `
		SELECT 'event ' || kind || coalesce(' ' || reason, ''), count(*) FROM run_events GROUP BY 1
		UNION ALL
		SELECT 'run ' || state || coalesce(' ' || reason, ''), count(*) FROM runs GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var mix []string
	for rows.Next() {
		var what string
		var n int
		_ = rows.Scan(&what, &n)
		mix = append(mix, fmt.Sprintf("%s=%d", what, n))
	}
	t.Logf("mix: %s", strings.Join(mix, ", "))
}

// checkAccepted: every run a client was told was accepted exists exactly once, as submitted.
func (w *world) checkAccepted(t *testing.T) {
	t.Helper()
	missing := 0
	w.accepted.Range(func(k, _ any) bool {
		if w.env.Count(`SELECT count(*) FROM runs WHERE run_id = $1`, k) != 1 {
			missing++
		}
		return true
	})
	if missing > 0 {
		t.Errorf("%d accepted runs are not stored exactly once", missing)
	}
}

// checkQueueOrder: among runs of one shape, no run entered RUNNING while a run the wake had to
// take first had been waiting, committed and visible, for more than a moment, and went on
// waiting. The moment (2 s) covers a wake that read the queue just before the other run's
// commit. Going on waiting means for more than a blink (250 ms) after the younger run entered
// RUNNING: an event carries its transaction's start, and two promotions of one shape that
// started a blink apart take their runs in the order their row locks are taken — the one that
// started first may find the older run already held by the other and rightly take the next
// (wake_promote), yet carry the earlier time. With the stress's
// starvation bound of a second, a run waiting that long is protected, and a protected run goes
// first — before any run not yet protected, whatever the priorities, and in arrival order
// among the protected.
func (w *world) checkQueueOrder(t *testing.T) {
	t.Helper()
	rows, err := w.env.Store.Pool().Query(context.Background(), `
		WITH entered AS (          -- every time a run joined the queue, and when it left
		    SELECT e.run_id, e.at AS since,
		           (SELECT min(l.at) FROM run_events l WHERE l.run_id = e.run_id AND l.event_id > e.event_id
		              AND l.from_state = 'QUEUED' AND l.to_state <> 'QUEUED') AS until
		    FROM run_events e WHERE e.to_state = 'QUEUED' AND e.from_state IS DISTINCT FROM 'QUEUED'
		), promoted AS (           -- every time a run entered RUNNING
		    SELECT e.run_id, e.at FROM run_events e WHERE e.to_state = 'RUNNING' AND e.from_state IS DISTINCT FROM 'RUNNING'
		)
		SELECT p.run_id, q.run_id FROM promoted p
		JOIN runs pr ON pr.run_id = p.run_id
		JOIN entered q ON q.run_id <> p.run_id
		JOIN runs qr ON qr.run_id = q.run_id AND qr.shape = pr.shape
		WHERE q.since < p.at - interval '2 seconds' AND (q.until IS NULL OR q.until > p.at + interval '250 milliseconds')
		  AND ((qr.created_at, qr.run_id) < (pr.created_at, pr.run_id) OR pr.created_at >= p.at - interval '1 second')
		LIMIT 5`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var younger, older string
		_ = rows.Scan(&younger, &older)
		t.Errorf("%s entered RUNNING while %s, of the same needs, waited to go first", younger, strings.TrimSpace(older))
	}
}

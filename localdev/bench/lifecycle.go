package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"mediator/shared/auth"
)

const (
	inFlight = 200 // runs submitted but not finished
	// An idle agent asks again after firstPoll, then backs off to maxPoll: quick to pick up
	// the run that follows the last one, cheap while there is none. (Real agents heartbeat
	// every LEASE_TTL/3; these poll far faster so the benchmark measures Mediator, not the
	// wait. Polling fast without backing off, idle agents would make most of the requests and
	// take the CPU the submitters need to give them work.)
	firstPoll = 10 * time.Millisecond
	maxPoll   = 200 * time.Millisecond
)

// fleetOf is a lifecycle section's fleet: how many nodes, and the label (and node-id prefix)
// only its nodes and runs carry, so no section places the runs another left in flight.
type fleetOf struct {
	nodes int
	label string
	key   string // prefix of its figures' keys
}

var (
	// spareFleet: fifty nodes, more than eight clients keep busy on two cores, so most of the
	// fleet is idle at any moment and the queue is short-lived: a run queues when another is
	// queued for a moment, and the wakes of its submit and of the nodes that free race for it.
	spareFleet = fleetOf{nodes: 50, label: "life", key: "lifecycle"}
	// waitedFleet: eight nodes, so the queue holds most of the runs in flight: it waits for
	// the nodes, as a lab's queue does for its boards.
	waitedFleet = fleetOf{nodes: 8, label: "lifeq", key: "lifecycle_queued"}
)

func (b *bench) lifecycle(ctx context.Context) error       { return b.lifecycleOf(ctx, spareFleet) }
func (b *bench) lifecycleQueued(ctx context.Context) error { return b.lifecycleOf(ctx, waitedFleet) }

// lifecycleOf measures whole runs through the real handlers: submit → the node's heartbeat
// picks the step up → started → succeeded (which settles the run, frees the node and wakes the
// queue onto it, and hands the node its next run when the wake placed one there), with a fleet
// of simulated nodes and 8 clients keeping inFlight runs submitted.
//
// What a run costs is counted per run: each call is charged to the run it was for (the
// heartbeat that picked a run up, to that run), and the runs finished in the section are
// summed, so a run still in flight at the end counts neither as a run nor by its calls. The
// heartbeats that found nothing new were for no run: they are reported beside it.
func (b *bench) lifecycleOf(ctx context.Context, f fleetOf) error {
	if err := b.exec(ctx, fmt.Sprintf(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT '%[1]s-' || i, ARRAY['%[1]s'], 'b1', now() + interval '1 day' FROM generate_series(1, %[2]d) i`, f.label, f.nodes)); err != nil {
		return err
	}
	// Afterwards its nodes take no more work: the runs it leaves in flight stay where they are.
	defer func() {
		_ = b.exec(context.WithoutCancel(ctx), fmt.Sprintf(`UPDATE nodes SET drain_requested_by = 'bench' WHERE node_id LIKE '%s-%%'`, f.label))
	}()
	if err := b.resetServerTime(ctx, b.db); err != nil {
		return err
	}
	var (
		submit, beat, idle, started, succeeded samples
		completed, handedOver                  atomic.Int64
		wg                                     sync.WaitGroup
		failure                                atomic.Value
		costs                                  runCosts
	)
	tokens := make(chan struct{}, inFlight)
	cpu := cpuBusy()
	end := time.Now().Add(b.dur)
	lctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	fail := func(format string, args ...any) { failure.Store(fmt.Sprintf(format, args...)); cancel() }

	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case tokens <- struct{}{}:
				case <-lctx.Done():
					return
				}
				id := fmt.Sprintf("%s%d-%d", f.label, c, i)
				res := b.do(ctx, client(c), "POST", "/v1/runs", oneStep(id, f.label))
				if res.status != 201 && res.status != 202 {
					fail("submit: %d %s", res.status, res.body)
					return
				}
				submit.add(res)
				costs.charge(id, res)
			}
		}()
	}
	for n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("%s-%d", f.label, n+1)
			who := auth.Principal{Kind: auth.Node, ID: node}
			poll := firstPoll
			for lctx.Err() == nil {
				res := b.do(ctx, who, "PUT", "/v1/nodes/"+node, map[string]any{"boot_id": "b1", "labels": []string{f.label}})
				if res.status != 200 {
					fail("heartbeat: %d %s", res.status, res.body)
					return
				}
				var hb work
				_ = json.Unmarshal(res.body, &hb)
				if hb.run() == "" {
					idle.add(res)
					time.Sleep(poll) // an idle agent polls, it does not spin
					poll = min(2*poll, maxPoll)
					continue
				}
				poll = firstPoll
				beat.add(res)
				costs.charge(hb.run(), res)
				// Work the run, and the next one the answer hands over, until an answer
				// hands over none: then back to heartbeating.
				run, epoch := hb.run(), hb.Lease.Epoch
				for run != "" && lctx.Err() == nil {
					target := "/v1/runs/" + run + "/steps/s1/result"
					r := b.do(ctx, who, "POST", target, map[string]any{"node_id": node, "boot_id": "b1", "epoch": epoch, "status": "started"})
					if r.status != 200 {
						fail("started: %d %s", r.status, r.body)
						return
					}
					started.add(r)
					costs.charge(run, r)
					r = b.do(ctx, who, "POST", target, map[string]any{"node_id": node, "boot_id": "b1", "epoch": epoch, "status": "succeeded", "exit_code": 0})
					if r.status != 200 {
						fail("succeeded: %d %s", r.status, r.body)
						return
					}
					succeeded.add(r)
					costs.charge(run, r)
					costs.finish(run)
					completed.Add(1)
					<-tokens
					var answer resultAnswer
					_ = json.Unmarshal(r.body, &answer)
					run = ""
					if next := answer.NextRun; next != nil && next.run() != "" {
						run, epoch = next.run(), next.Lease.Epoch
						handedOver.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	cost := cpuPer(cpu, completed.Load())
	if msg, ok := failure.Load().(string); ok {
		return fmt.Errorf("%s", msg)
	}
	server, err := b.serverTime(ctx, b.db)
	if err != nil {
		return err
	}
	runs := float64(max(1, completed.Load()))
	rate := float64(completed.Load()) / b.dur.Seconds()
	q, tx := costs.perRun()
	// Everything the server ran for the section, idle heartbeats and runs left in flight
	// included, over the runs it finished. Under this load a statement's execution time also
	// holds its waits for row locks and for the CPU: alone's figure is the run's own.
	serverPerRun := total(server) / runs
	if f == spareFleet {
		b.rate("lifecycle", rate)
		b.rate("lifecycle tx", tx)
	}
	b.figure(f.key+"_runs_per_s", rate)
	b.figure(f.key+"_tx_per_run", tx)
	b.figure(f.key+"_round_trips_per_run", q)
	b.figure(f.key+"_idle_heartbeats_per_run", float64(idle.n())/runs)
	b.figure(f.key+"_idle_heartbeat_tx_per_run", float64(idle.txs)/runs)
	b.figure(f.key+"_server_ms_per_run", serverPerRun)
	b.figure(f.key+"_handed_over_share", float64(handedOver.Load())/runs)
	what := "most of the fleet idle, the queue short-lived"
	if f == waitedFleet {
		what = "the queue waiting for the nodes"
	}
	b.add(row{measure: fmt.Sprintf("lifecycle: submit → pick-up → started → succeeded (%d nodes, %s; %.0f%% picked up from the last result's answer, the rest by heartbeat; round trips and transactions per run, of its own calls)",
		f.nodes, what, 100*float64(handedOver.Load())/runs),
		value: perSec(rate, "runs") + ", " + cost, roundTrips: fmt.Sprintf("%.1f", q), txs: fmt.Sprintf("%.1f", tx),
		target: verdict(rate >= 1000, "≥ 1,000 runs/s")})
	b.add(row{measure: "  · server time per run (pg_stat_statements: execution and planning of all the section ran, lock and CPU waits included, over the runs finished)",
		value: fmt.Sprintf("%.2f ms", serverPerRun)})
	b.add(latencyRow("  · submit", "", &submit, verdict(submit.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	b.add(latencyRow("  · heartbeat that picks up a step", "", &beat, verdict(beat.pct(0.99) < 3*time.Millisecond, "p99 < 3 ms")))
	idleRow := latencyRow(fmt.Sprintf("  · heartbeat with nothing new (%d, %.1f per run; not in the run's count: per run, not per call)", idle.n(), float64(idle.n())/runs),
		"", &idle, verdict(idle.pct(0.99) < 3*time.Millisecond, "p99 < 3 ms"))
	idleRow.roundTrips, idleRow.txs = fmt.Sprintf("%.1f", float64(idle.queries)/runs), fmt.Sprintf("%.1f", float64(idle.txs)/runs)
	b.add(idleRow)
	b.add(latencyRow("  · result: started", "", &started, verdict(started.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	b.add(latencyRow("  · result: succeeded (settles, wakes)", "", &succeeded, verdict(succeeded.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	return nil
}

// runCosts charges each call to the run it was for.
type runCosts struct {
	mu    sync.Mutex
	byRun map[string]*runCost
}

type runCost struct {
	queries, txs int64
	finished     bool
}

func (r *runCosts) get(run string) *runCost {
	if r.byRun == nil {
		r.byRun = map[string]*runCost{}
	}
	c := r.byRun[run]
	if c == nil {
		c = &runCost{}
		r.byRun[run] = c
	}
	return c
}

func (r *runCosts) charge(run string, c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.get(run)
	rc.queries += c.queries
	rc.txs += c.txs
}

// finish marks the run done. Its submit may be charged after this: the node can finish a run
// before the submit's handler has returned.
func (r *runCosts) finish(run string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(run).finished = true
}

// perRun is the round trips and transactions of the finished runs' calls, per finished run.
func (r *runCosts) perRun() (queries, txs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.byRun {
		if c.finished {
			n++
			queries += float64(c.queries)
			txs += float64(c.txs)
		}
	}
	if n == 0 {
		return 0, 0
	}
	return queries / float64(n), txs / float64(n)
}

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
	fleetSize = 50
	inFlight  = 200 // runs submitted but not finished: the queue the fleet drains
	// An idle agent asks again after firstPoll, then backs off to maxPoll: quick to pick up
	// the run that follows the last one, cheap while there is none. (Real agents heartbeat
	// every LEASE_TTL/3; these poll far faster so the benchmark measures Mediator, not the
	// wait. At a flat 20 ms, fifty idle agents were half of all requests and took the CPU
	// the submitters needed to give them work.)
	firstPoll = 10 * time.Millisecond
	maxPoll   = 200 * time.Millisecond
)

// lifecycle measures whole runs through the real handlers: submit → the node's heartbeat picks
// the step up → started → succeeded (which settles the run, frees the node and wakes the queue
// onto it), with a fleet of 50 simulated nodes and 8 clients keeping work queued.
func (b *bench) lifecycle(ctx context.Context) error {
	if err := b.exec(ctx, fmt.Sprintf(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'life-' || i, ARRAY['life'], 'b1', now() + interval '1 day' FROM generate_series(1, %d) i`, fleetSize)); err != nil {
		return err
	}
	var (
		submit, beat, idle, started, succeeded samples
		completed, handedOver                  atomic.Int64
		wg                                     sync.WaitGroup
		failure                                atomic.Value
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
				res := b.do(ctx, client(c), "POST", "/v1/runs", oneStep(fmt.Sprintf("l%d-%d", c, i), "life"))
				if res.status != 201 && res.status != 202 {
					fail("submit: %d %s", res.status, res.body)
					return
				}
				submit.add(res)
			}
		}()
	}
	for n := range fleetSize {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("life-%d", n+1)
			who := auth.Principal{Kind: auth.Node, ID: node}
			poll := firstPoll
			for lctx.Err() == nil {
				res := b.do(ctx, who, "PUT", "/v1/nodes/"+node, map[string]any{"boot_id": "b1", "labels": []string{"life"}})
				if res.status != 200 {
					fail("heartbeat: %d %s", res.status, res.body)
					return
				}
				var hb struct {
					Lease *struct{ Epoch int64 } `json:"lease"`
					Steps []struct {
						RunID string `json:"run_id"`
					} `json:"steps"`
				}
				_ = json.Unmarshal(res.body, &hb)
				if hb.Lease == nil || len(hb.Steps) == 0 {
					idle.add(res)
					time.Sleep(poll) // an idle agent polls, it does not spin
					poll = min(2*poll, maxPoll)
					continue
				}
				poll = firstPoll
				beat.add(res)
				// Work the run, and the next one the answer hands over, until an answer
				// hands over none: then back to heartbeating.
				run, epoch := hb.Steps[0].RunID, hb.Lease.Epoch
				for run != "" && lctx.Err() == nil {
					target := "/v1/runs/" + run + "/steps/s1/result"
					r := b.do(ctx, who, "POST", target, map[string]any{"node_id": node, "boot_id": "b1", "epoch": epoch, "status": "started"})
					if r.status != 200 {
						fail("started: %d %s", r.status, r.body)
						return
					}
					started.add(r)
					r = b.do(ctx, who, "POST", target, map[string]any{"node_id": node, "boot_id": "b1", "epoch": epoch, "status": "succeeded", "exit_code": 0})
					if r.status != 200 {
						fail("succeeded: %d %s", r.status, r.body)
						return
					}
					succeeded.add(r)
					completed.Add(1)
					<-tokens
					var answer struct {
						NextRun *struct {
							Lease struct{ Epoch int64 }
							Steps []struct {
								RunID string `json:"run_id"`
							}
						} `json:"next_run"`
					}
					_ = json.Unmarshal(r.body, &answer)
					run = ""
					if answer.NextRun != nil && len(answer.NextRun.Steps) > 0 {
						run, epoch = answer.NextRun.Steps[0].RunID, answer.NextRun.Lease.Epoch
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
	rate := float64(completed.Load()) / b.dur.Seconds()
	b.rate("lifecycle", rate)
	var q, tx float64
	for _, s := range []*samples{&submit, &beat, &started, &succeeded} {
		sq, stx := s.perCall()
		q, tx = q+sq, tx+stx
	}
	b.rate("lifecycle tx", tx)
	b.add(row{measure: fmt.Sprintf("lifecycle: submit → pick-up → started → succeeded (%d nodes; %.0f%% picked up from the last result's answer, the rest by heartbeat)",
		fleetSize, 100*float64(handedOver.Load())/float64(max(1, completed.Load()))),
		value: perSec(rate, "runs") + ", " + cost, roundTrips: fmt.Sprintf("%.1f", q), txs: fmt.Sprintf("%.1f", tx),
		target: verdict(rate >= 1000, "≥ 1,000 runs/s")})
	b.add(latencyRow("  · submit", "", &submit, verdict(submit.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	b.add(latencyRow("  · heartbeat that picks up a step", "", &beat, verdict(beat.pct(0.99) < 3*time.Millisecond, "p99 < 3 ms")))
	b.add(latencyRow(fmt.Sprintf("  · heartbeat with nothing new (%d)", idle.n()), "", &idle, verdict(idle.pct(0.99) < 3*time.Millisecond, "p99 < 3 ms")))
	b.add(latencyRow("  · result: started", "", &started, verdict(started.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	b.add(latencyRow("  · result: succeeded (settles, wakes)", "", &succeeded, verdict(succeeded.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms")))
	return nil
}

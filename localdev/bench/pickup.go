package main

import (
	"context"
	"fmt"
	"time"
)

// pickupTTL is the pickup section's LEASE_TTL: short, so the advertised cadence (a third of
// it, one second) makes a wait measurable in a ten-second section.
const pickupTTL = 3 * time.Second

// pickup measures how long a placed run waits for its node: from placement to the step's
// started, with 20 nodes heartbeating at the cadence the server advertises (not the
// lifecycle's fast polling) and a client submitting about 10 runs a second at random, so most
// find a free node. A run placed on an idle node waits for that node's next beat; one queued
// behind busy nodes is handed over by a result's answer at once. The wait is half a cadence
// on average only on an idle fleet: under load a node that has not beaten for a while has
// likely been given a run already, so the nodes still free lean to those that just beat (at
// this rate the median is some 0.6–0.7 s, at 2 runs/s nearer 0.55 s).
func (b *bench) pickup(ctx context.Context) error {
	c := &cadenced{api: b.withLeaseTTL(pickupTTL), name: "pick", nodes: 20, need: "pickup",
		labels: func(int) []string { return []string{"pickup"} }, cadence: pickupTTL / 3, rate: 10}
	c.schedule(b.dur)
	if err := c.run(ctx); err != nil {
		return err
	}
	waits, runs, err := c.pickups(ctx, b)
	if err != nil {
		return err
	}
	if waits.n() == 0 {
		return fmt.Errorf("no run of the window was picked up")
	}
	b.figure("pickup_p50_ms", msOf(waits.pct(0.50)))
	b.figure("pickup_p99_ms", msOf(waits.pct(0.99)))
	b.figure("pickup_cadence_s", c.cadence.Seconds())
	b.figure("pickup_runs", float64(waits.n()))
	b.figure("pickup_by_heartbeat_share", float64(c.byBeat.Load())/float64(waits.n()))
	title := fmt.Sprintf("pickup: placement → started (%d nodes heartbeating every %s as advertised at LEASE_TTL %s; %.0f runs/s at random; %.0f%% found by heartbeat, the rest handed over by a result's answer)",
		c.nodes, secs(c.cadence), secs(pickupTTL), c.rate, 100*float64(c.byBeat.Load())/float64(waits.n()))
	value := fmt.Sprintf("%d runs (half a cadence, %s, on an idle fleet; more under load: the free nodes lean to those that just beat)", waits.n(), secs(c.cadence/2))
	if waits.n() < runs {
		value += fmt.Sprintf("; %d of %d not started when the section ended", runs-waits.n(), runs)
	}
	b.add(row{measure: title, value: value, p50: ms(waits.pct(0.50)), p95: ms(waits.pct(0.95)), p99: ms(waits.pct(0.99))})
	return b.endAll(ctx)
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

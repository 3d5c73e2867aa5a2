package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"mediator/shared/auth"
)

// alone measures what each handler costs when nothing else runs: one client, one node, one run
// at a time through submit → pick-up → started → succeeded. Under the lifecycle's load every
// call also waits for the fifty-seven others on two cores; here the latency is the call's own,
// and the machine's CPU per run is what a run costs.
func (b *bench) alone(ctx context.Context) error {
	if err := b.exec(ctx, `INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		VALUES ('solo', ARRAY['solo'], 'b1', now() + interval '1 day')`); err != nil {
		return err
	}
	// Start from a flushed server: the checkpoint the database's creation left due would
	// otherwise land in the measured second. (Not every role may; then it is skipped.)
	_ = b.exec(ctx, `CHECKPOINT`)
	who := auth.Principal{Kind: auth.Node, ID: "solo"}
	beat := func() call {
		return b.do(ctx, who, "PUT", "/v1/nodes/solo", map[string]any{"boot_id": "b1", "labels": []string{"solo"}})
	}
	var submit, pickup, quiet, started, succeeded samples
	// Warm up first, as a Lambda environment that has served a few requests: connections open,
	// statements prepared, caches filled. Only the second second on is measured.
	var cpu time.Duration
	begin, warm := time.Now(), time.Now().Add(time.Second)
	measured := func() bool { return time.Now().After(warm) }
	runs := int64(0)
	for i := 0; time.Since(begin) < b.dur+time.Second && ctx.Err() == nil; i++ {
		if cpu == 0 && measured() {
			if err := b.resetServerTime(ctx, b.db); err != nil {
				return err
			}
			cpu = cpuBusy()
			submit, pickup, quiet, started, succeeded = samples{}, samples{}, samples{}, samples{}, samples{}
		}
		id := fmt.Sprintf("solo-%d", i)
		if c := b.do(ctx, client(0), "POST", "/v1/runs", oneStep(id, "solo")); c.status != 201 {
			return fmt.Errorf("submit: %d %s", c.status, c.body)
		} else {
			submit.add(c)
		}
		c := beat()
		var hb struct{ Lease *struct{ Epoch int64 } }
		if err := json.Unmarshal(c.body, &hb); err != nil || c.status != 200 || hb.Lease == nil {
			return fmt.Errorf("pick-up: %d %s", c.status, c.body)
		}
		pickup.add(c)
		quiet.add(beat())
		target := "/v1/runs/" + id + "/steps/s1/result"
		for _, st := range []struct {
			status string
			s      *samples
		}{{"started", &started}, {"succeeded", &succeeded}} {
			report := map[string]any{"node_id": "solo", "boot_id": "b1", "epoch": hb.Lease.Epoch, "status": st.status}
			if st.status == "succeeded" { // a started step has not exited
				report["exit_code"] = 0
			}
			c := b.do(ctx, who, "POST", target, report)
			if c.status != 200 {
				return fmt.Errorf("%s: %d %s", st.status, c.status, c.body)
			}
			st.s.add(c)
		}
		if cpu != 0 {
			runs++
		}
	}
	server, err := b.serverTime(ctx, b.db)
	if err != nil {
		return err
	}
	// With nothing else running, the server's time is the run's own: no lock or CPU to wait
	// for, which under the lifecycle's load the same figure includes.
	serverPerRun := total(server) / float64(max(1, runs))
	b.figure("alone_runs_per_s", float64(runs)/b.dur.Seconds())
	b.figure("alone_server_ms_per_run", serverPerRun)
	b.add(row{measure: "one run at a time (one client, one node): submit → pick-up → started → succeeded",
		value: perSec(float64(runs)/b.dur.Seconds(), "runs") + ", " + cpuPer(cpu, runs) + fmt.Sprintf(", %.2f ms server time each", serverPerRun)})
	heartbeatTarget := func(s *samples) string { return verdict(s.pct(0.99) < 3*time.Millisecond, "p99 < 3 ms") }
	callTarget := func(s *samples) string { return verdict(s.pct(0.99) < 6*time.Millisecond, "p99 < 6 ms") }
	b.add(latencyRow("  · submit → 201", "", &submit, callTarget(&submit)))
	b.add(latencyRow("  · heartbeat that picks up the step", "", &pickup, heartbeatTarget(&pickup)))
	b.add(latencyRow("  · heartbeat with nothing new", "", &quiet, heartbeatTarget(&quiet)))
	b.add(latencyRow("  · result: started", "", &started, callTarget(&started)))
	b.add(latencyRow("  · result: succeeded (settles, wakes)", "", &succeeded, callTarget(&succeeded)))
	// The sections after it bring their own fleets, and should not pay for this one's churn.
	if err := b.exec(ctx, `DELETE FROM nodes WHERE node_id = 'solo'`); err != nil {
		return err
	}
	return b.vacuum(ctx)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mediator/shared/auth"
)

// pushTTL is the push section's LEASE_TTL: the default, so nodes heartbeat every 20 s, the
// cadence push is for.
const pushTTL = 60 * time.Second

// pushed is a fleet of simulated nodes on push: each heartbeats at the advertised cadence, as
// the agent does, and at once when a hint comes on its topic of the stack's broker (a real
// mosquitto, the hints published through the handlers' real Hinter and the local data plane).
// Like a real agent it reports a step started as soon as an answer gives it; a pickup run's
// step (pp-…) it then reports succeeded, a cancel run's (pc-…) it keeps running until an
// answer says cancel, and then reports it cancelled: what stands for its process gone.
type pushed struct {
	api   *api
	nodes int
	beats atomic.Int64

	mu        sync.Mutex
	started   map[string]bool      // steps reported started
	cancelled map[string]time.Time // the cancel runs, when their node reported them cancelled
}

type pushBeat struct {
	work
	Steps []struct {
		RunID  string `json:"run_id"`
		StepID string `json:"step_id"`
		Cancel bool   `json:"cancel"`
	} `json:"steps"`
	Push *struct{ URL, Topic string } `json:"push"`
}

// push measures placement → started and cancel → the step stopped with nodes on the 20 s
// cadence and push on; the heartbeats an idle node sends an hour; and the hints a run costs.
func (b *bench) push(ctx context.Context, nodes int) error {
	if b.stack.DataPlane == nil {
		return fmt.Errorf("the stack serves no push (devserver.Options.Push)")
	}
	p := &pushed{api: b.withLeaseTTLPush(pushTTL, true), nodes: nodes, started: map[string]bool{}, cancelled: map[string]time.Time{}}
	nctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failure atomic.Value
	connected := make(chan struct{}, nodes)
	cadence := pushTTL / 3
	for i := range nodes {
		// The first beats spread over one cadence, as a fleet's are: any window then holds
		// its length's worth of each node's beats.
		first := time.Duration(i) * cadence / time.Duration(nodes)
		wg.Go(func() {
			if err := p.node(ctx, nctx, fmt.Sprintf("push-%d", i+1), first, connected); err != nil {
				failure.Store(err.Error())
				stop()
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	for range nodes {
		select {
		case <-connected:
		case <-nctx.Done():
			return fmt.Errorf("%v", failure.Load())
		}
	}

	// Idle: two cadences with nothing to do.
	idleFor := 2 * cadence
	from := p.beats.Load()
	if !sleepUntil(nctx, time.Now().Add(idleFor)) {
		return fmt.Errorf("%v", failure.Load())
	}
	idlePerHour := float64(p.beats.Load()-from) / float64(nodes) / idleFor.Hours()

	// Pickup: runs at random, about two a second, each on an idle node.
	hints, beats := b.stack.DataPlane.Published(), p.beats.Load()
	var ids []string
	for i, end := 1, time.Now().Add(b.dur); time.Now().Before(end) && nctx.Err() == nil; i++ {
		id := fmt.Sprintf("pp-%d", i)
		if res := p.api.do(ctx, client(0), "POST", "/v1/runs", oneStep(id, "push")); res.status != 201 && res.status != 202 {
			return fmt.Errorf("submit: %d %s", res.status, res.body)
		}
		ids = append(ids, id)
		sleepUntil(nctx, time.Now().Add(time.Duration(rand.ExpFloat64()/2*float64(time.Second))))
	}
	if err := b.waitFinished(nctx, ids); err != nil {
		return err
	}
	runs := len(ids)
	hintsPerRun := float64(b.stack.DataPlane.Published()-hints) / float64(runs)
	beatsPerRun := float64(p.beats.Load()-beats) / float64(runs)
	waits, err := b.pickupsOf(ctx, ids)
	if err != nil {
		return err
	}

	// Cancel: a run's step running, then cancelled; from the cancel's answer to the node's
	// cancelled report.
	cancels := &samples{}
	for i := 1; i <= 20 && nctx.Err() == nil; i++ {
		id := fmt.Sprintf("pc-%d", i)
		if res := p.api.do(ctx, client(0), "POST", "/v1/runs", oneStep(id, "push")); res.status != 201 {
			return fmt.Errorf("submit %s: %d %s", id, res.status, res.body)
		}
		if !p.until(nctx, func() bool { return p.started[id+"/s1"] }) {
			return fmt.Errorf("%s never started: %v", id, failure.Load())
		}
		res := p.api.do(ctx, client(0), "POST", "/v1/runs/"+id+"/cancel", map[string]any{"reason": "bench"})
		if res.status != 202 {
			return fmt.Errorf("cancel %s: %d %s", id, res.status, res.body)
		}
		answered := time.Now()
		if !p.until(nctx, func() bool { return !p.cancelled[id].IsZero() }) {
			return fmt.Errorf("%s never cancelled: %v", id, failure.Load())
		}
		p.mu.Lock()
		cancels.add(call{took: p.cancelled[id].Sub(answered)})
		p.mu.Unlock()
	}

	b.figure("pickup_push_p50_ms", msOf(waits.pct(0.50)))
	b.figure("pickup_push_p99_ms", msOf(waits.pct(0.99)))
	b.figure("cancel_push_p50_ms", msOf(cancels.pct(0.50)))
	b.figure("cancel_push_p99_ms", msOf(cancels.pct(0.99)))
	b.figure("push_idle_heartbeats_per_node_hour", idlePerHour)
	b.figure("push_messages_per_run", hintsPerRun)
	b.figure("push_heartbeats_per_run", beatsPerRun)
	title := fmt.Sprintf("push: %d nodes heartbeating every %s (LEASE_TTL %s), each subscribed to its hints on a local mosquitto; ~2 runs/s at random", nodes, secs(pushTTL/3), secs(pushTTL))
	b.add(row{measure: title, value: fmt.Sprintf("idle: %.0f heartbeats per node-hour (the cadence's %.0f); %.2f hints per run (2 IoT Core messages each: the publish, its delivery); %.2f heartbeats per run in the window, the cadence's included",
		idlePerHour, time.Hour.Seconds()/(pushTTL/3).Seconds(), hintsPerRun, beatsPerRun)})
	b.add(row{measure: "  · pickup with push: placement → started", value: fmt.Sprintf("%d runs (without push: half a cadence, %s, on average)", waits.n(), secs(pushTTL/6)),
		p50: ms(waits.pct(0.50)), p95: ms(waits.pct(0.95)), p99: ms(waits.pct(0.99)),
		target: verdict(waits.pct(0.50) <= 300*time.Millisecond && waits.pct(0.99) <= time.Second, "p50 ≤ 300 ms, p99 ≤ 1 s")})
	b.add(row{measure: "  · cancel with push: the cancel's answer → the node's step stopped", value: fmt.Sprintf("%d runs", cancels.n()),
		p50: ms(cancels.pct(0.50)), p95: ms(cancels.pct(0.95)), p99: ms(cancels.pct(0.99)),
		target: verdict(cancels.pct(0.50) <= 300*time.Millisecond && cancels.pct(0.99) <= time.Second, "p50 ≤ 300 ms, p99 ≤ 1 s")})
	stop()
	wg.Wait()
	return b.endAll(ctx)
}

// until polls cond under p.mu until it holds; false when ctx ended first.
func (p *pushed) until(ctx context.Context, cond func() bool) bool {
	for ctx.Err() == nil {
		p.mu.Lock()
		ok := cond()
		p.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// node heartbeats, connects to the broker its first answer offers, and then heartbeats at the
// cadence or at once on a hint, until nctx ends.
func (p *pushed) node(ctx, nctx context.Context, id string, first time.Duration, connected chan<- struct{}) error {
	who := auth.Principal{Kind: auth.Node, ID: id}
	advert := map[string]any{"boot_id": "b1", "labels": []string{"push"}}
	hints := make(chan struct{}, 1)
	var mqtt paho.Client
	defer func() {
		if mqtt != nil {
			mqtt.Disconnect(0)
		}
	}()
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-nctx.Done():
			return nil
		case <-timer.C:
		case <-hints:
		}
		res := p.api.do(ctx, who, "PUT", "/v1/nodes/"+id, advert)
		if res.status != 200 {
			return fmt.Errorf("heartbeat: %d %s", res.status, res.body)
		}
		p.beats.Add(1)
		var hb pushBeat
		if err := json.Unmarshal(res.body, &hb); err != nil || hb.NextHeartbeatSeconds <= 0 {
			return fmt.Errorf("heartbeat: %s", res.body)
		}
		if mqtt == nil {
			if hb.Push == nil {
				return fmt.Errorf("the heartbeat offers no push: %s", res.body)
			}
			mqtt = paho.NewClient(paho.NewClientOptions().AddBroker(hb.Push.URL).SetClientID(id).SetCleanSession(true))
			if tok := mqtt.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				return fmt.Errorf("connect: %v", tok.Error())
			}
			tok := mqtt.Subscribe(hb.Push.Topic, 0, func(paho.Client, paho.Message) {
				select {
				case hints <- struct{}{}:
				default:
				}
			})
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				return fmt.Errorf("subscribe: %v", tok.Error())
			}
			connected <- struct{}{}
		}
		for _, st := range hb.Steps {
			if hb.Lease == nil {
				break
			}
			if err := p.step(ctx, who, hb.Lease.Epoch, st.RunID, st.StepID, st.Cancel); err != nil {
				return err
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(time.Duration(hb.NextHeartbeatSeconds) * time.Second)
	}
}

// step does what the agent does with a step an answer gives it.
func (p *pushed) step(ctx context.Context, who auth.Principal, epoch int64, runID, stepID string, cancel bool) error {
	key := runID + "/" + stepID
	report := func(status string) error {
		body := map[string]any{"node_id": who.ID, "boot_id": "b1", "epoch": epoch, "status": status}
		if status == "succeeded" {
			body["exit_code"] = 0
		}
		res := p.api.do(ctx, who, "POST", "/v1/runs/"+runID+"/steps/"+stepID+"/result", body)
		if res.status != 200 {
			return fmt.Errorf("%s %s: %d %s", key, status, res.status, res.body)
		}
		// The node a succeeded's answer hands its next run gets no hint: it takes it from here.
		var answer struct {
			NextRun *pushBeat `json:"next_run"`
		}
		if status == "succeeded" && json.Unmarshal(res.body, &answer) == nil && answer.NextRun != nil && answer.NextRun.Lease != nil {
			for _, st := range answer.NextRun.Steps {
				if err := p.step(ctx, who, answer.NextRun.Lease.Epoch, st.RunID, st.StepID, st.Cancel); err != nil {
					return err
				}
			}
		}
		return nil
	}
	p.mu.Lock()
	started, done := p.started[key], !p.cancelled[runID].IsZero()
	p.mu.Unlock()
	switch {
	case cancel && !done:
		if err := report("cancelled"); err != nil {
			return err
		}
		p.mu.Lock()
		p.cancelled[runID] = time.Now()
		p.mu.Unlock()
	case !cancel && !started:
		if err := report("started"); err != nil {
			return err
		}
		p.mu.Lock()
		p.started[key] = true
		p.mu.Unlock()
		if strings.HasPrefix(runID, "pp-") {
			return report("succeeded")
		}
	}
	return nil
}

// waitFinished waits until every run of ids has ended, or a minute.
func (b *bench) waitFinished(ctx context.Context, ids []string) error {
	for deadline := time.Now().Add(time.Minute); ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		var left int
		if err := b.stack.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id = ANY($1) AND finished_at IS NULL`, ids).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d runs not finished after a minute", left, len(ids))
		}
	}
	return ctx.Err()
}

// pickupsOf is, for each run of ids whose step has started, the time from its placement to
// its step's started, both read from the database (one clock).
func (b *bench) pickupsOf(ctx context.Context, ids []string) (*samples, error) {
	rows, err := b.stack.Store.Pool().Query(ctx, `SELECT extract(epoch FROM s.started_at - r.started_at)::float8
		FROM runs r JOIN steps s ON s.run_id = r.run_id WHERE r.run_id = ANY($1) AND s.started_at IS NOT NULL`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := &samples{}
	for rows.Next() {
		var secs float64
		if err := rows.Scan(&secs); err != nil {
			return nil, err
		}
		s.add(call{took: time.Duration(secs * float64(time.Second))})
	}
	if s.n() == 0 {
		return nil, fmt.Errorf("no run was picked up")
	}
	return s, rows.Err()
}

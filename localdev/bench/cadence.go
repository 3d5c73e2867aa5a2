package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"mediator/shared/auth"
)

// work is what a heartbeat answers, and what a result's answer hands over as next_run: the
// lease the node holds and the steps it gives.
type work struct {
	Lease *struct{ Epoch int64 } `json:"lease"`
	Steps []struct {
		RunID string `json:"run_id"`
	} `json:"steps"`
	NextHeartbeatSeconds int `json:"next_heartbeat_seconds"`
}

// run is the run the node is given, "" for none.
func (w *work) run() string {
	if w == nil || w.Lease == nil || len(w.Steps) == 0 {
		return ""
	}
	return w.Steps[0].RunID
}

type resultAnswer struct {
	NextRun *work `json:"next_run"`
}

// cadenced is a fleet of simulated nodes that heartbeat at the cadence the server advertises
// (next_heartbeat_seconds, LEASE_TTL/3), as real agents do, and a client submitting one-step
// runs at random (Poisson) times. A node works what an answer gives it at once — started, then
// succeeded — and then the run the succeeded's answer hands over, if any; then it waits for
// its next beat. Each node registers by its own first heartbeat, the first beats spread evenly
// over the first cadence (the ramp), so the load is as smooth from the start as after it.
type cadenced struct {
	api     caller
	name    string // nodes are <name>-1…, runs <name>-r1…
	nodes   int
	labels  func(node int) []string
	need    string        // the runs' one need
	cadence time.Duration // what the server will advertise: the ramp is one
	rate    float64       // runs submitted per second

	// Calls that begin in [from, to) are measured, and the runs submitted then are the
	// pickup's; the client stops at to, and the nodes once every run submitted has finished.
	start, from, to time.Time

	beats, idle, submit, started, succeeded samples
	// lag is how late the generator's own timers fired: a node's beat, a client's arrival.
	// What a call's time holds of the generator and not of the server starts there.
	lag                 samples
	byBeat, handedOver  atomic.Int64 // the window's runs, by how the node got them
	submitted, finished atomic.Int64

	mu     sync.Mutex
	window map[string]bool // the runs submitted in the window
}

// schedule sets the ramp (one cadence) and the measured window after it, from now.
func (c *cadenced) schedule(measure time.Duration) {
	c.start = time.Now()
	c.from = c.start.Add(c.cadence)
	c.to = c.from.Add(measure)
	c.window = map[string]bool{}
}

func (c *cadenced) measured(t time.Time) bool { return !t.Before(c.from) && t.Before(c.to) }

func (c *cadenced) inWindow(run string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.window[run]
}

// run runs the fleet and the client until the client has stopped and every run it submitted
// has finished, or two cadences after the window (then some runs are left unfinished).
func (c *cadenced) run(ctx context.Context) error {
	nctx, stop := context.WithCancel(ctx)
	defer stop()
	var failure atomic.Value
	fail := func(format string, args ...any) { failure.Store(fmt.Sprintf(format, args...)); stop() }
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := c.start.Add(time.Duration(i) * c.cadence / time.Duration(c.nodes))
			if err := c.node(ctx, nctx, i+1, first); err != nil {
				fail("%s", err)
			}
		}()
	}
	if err := c.client(ctx, nctx); err != nil {
		fail("%s", err)
	}
	for drain := c.to.Add(2 * c.cadence); nctx.Err() == nil && c.finished.Load() < c.submitted.Load() && time.Now().Before(drain); {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	wg.Wait()
	if msg, ok := failure.Load().(string); ok {
		return fmt.Errorf("%s", msg)
	}
	return ctx.Err()
}

// client submits until the window ends, each submit in a goroutine of its own at its arrival
// time: a slow answer does not hold back the next arrival.
func (c *cadenced) client(ctx, nctx context.Context) error {
	var wg sync.WaitGroup
	var failure atomic.Value
	next := c.start
	for i := 1; nctx.Err() == nil; i++ {
		next = next.Add(time.Duration(rand.ExpFloat64() / c.rate * float64(time.Second)))
		if !next.Before(c.to) || !sleepUntil(nctx, next) {
			break
		}
		id := fmt.Sprintf("%s-r%d", c.name, i)
		if c.measured(next) {
			c.lag.add(call{took: time.Since(next)})
			c.mu.Lock()
			c.window[id] = true
			c.mu.Unlock()
		}
		c.submitted.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			res := c.api.do(ctx, client(0), "POST", "/v1/runs", oneStep(id, c.need))
			if res.status != 201 && res.status != 202 {
				failure.Store(fmt.Sprintf("submit: %d %s", res.status, res.body))
				return
			}
			if c.measured(began) {
				c.submit.add(res)
			}
		}()
	}
	wg.Wait()
	if msg, ok := failure.Load().(string); ok {
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// node heartbeats at first, then every advertised cadence after the last beat was due, until
// nctx ends; its calls run under ctx, so a call begun is finished.
func (c *cadenced) node(ctx, nctx context.Context, n int, first time.Time) error {
	id := fmt.Sprintf("%s-%d", c.name, n)
	who := auth.Principal{Kind: auth.Node, ID: id}
	advert := map[string]any{"boot_id": "b1", "labels": c.labels(n)}
	for due := first; sleepUntil(nctx, due); {
		began := time.Now()
		if c.measured(due) {
			c.lag.add(call{took: began.Sub(due)})
		}
		res := c.api.do(ctx, who, "PUT", "/v1/nodes/"+id, advert)
		if res.status != 200 {
			return fmt.Errorf("heartbeat: %d %s", res.status, res.body)
		}
		var hb work
		if err := json.Unmarshal(res.body, &hb); err != nil || hb.NextHeartbeatSeconds <= 0 {
			return fmt.Errorf("heartbeat: no cadence in %s", res.body)
		}
		if c.measured(began) {
			c.beats.add(res)
			if hb.run() == "" {
				c.idle.add(res)
			}
		}
		due = due.Add(time.Duration(hb.NextHeartbeatSeconds) * time.Second)
		if hb.run() == "" {
			continue
		}
		if c.inWindow(hb.run()) {
			c.byBeat.Add(1)
		}
		if err := c.work(ctx, who, &hb); err != nil {
			return err
		}
	}
	return nil
}

// work reports the run started, then succeeded, and does the same with each run an answer
// hands over.
func (c *cadenced) work(ctx context.Context, who auth.Principal, w *work) error {
	for w.run() != "" {
		target := "/v1/runs/" + w.run() + "/steps/s1/result"
		if _, err := c.report(ctx, who, target, w.Lease.Epoch, "started", &c.started); err != nil {
			return err
		}
		res, err := c.report(ctx, who, target, w.Lease.Epoch, "succeeded", &c.succeeded)
		if err != nil {
			return err
		}
		c.finished.Add(1)
		var answer resultAnswer
		_ = json.Unmarshal(res.body, &answer)
		if w = answer.NextRun; c.inWindow(w.run()) {
			c.handedOver.Add(1)
		}
	}
	return nil
}

func (c *cadenced) report(ctx context.Context, who auth.Principal, target string, epoch int64, status string, s *samples) (call, error) {
	body := map[string]any{"node_id": who.ID, "boot_id": "b1", "epoch": epoch, "status": status}
	if status == "succeeded" {
		body["exit_code"] = 0
	}
	began := time.Now()
	res := c.api.do(ctx, who, "POST", target, body)
	if res.status != 200 {
		return res, fmt.Errorf("%s: %d %s", status, res.status, res.body)
	}
	if c.measured(began) {
		s.add(res)
	}
	return res, nil
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// pickups is, for each of the window's runs whose step has started, the time from its
// placement (the run's started_at) to its step's started (the step's), both read from the
// database so that one clock measures both; and how many of the window's runs there were.
func (c *cadenced) pickups(ctx context.Context, b *bench) (*samples, int, error) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.window))
	for id := range c.window {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	rows, err := b.stack.Store.Pool().Query(ctx, `SELECT extract(epoch FROM s.started_at - r.started_at)::float8
		FROM runs r JOIN steps s ON s.run_id = r.run_id WHERE r.run_id = ANY($1) AND s.started_at IS NOT NULL`, ids)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	s := &samples{}
	for rows.Next() {
		var secs float64
		if err := rows.Scan(&secs); err != nil {
			return nil, 0, err
		}
		s.add(call{took: time.Duration(secs * float64(time.Second))})
	}
	return s, len(ids), rows.Err()
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"

	"mediator/localdev/devserver"
	"mediator/localdev/gateway"
	"mediator/localdev/pgcount"
	"mediator/shared/auth"
	"mediator/shared/config"
	"mediator/shared/httpapi"
	"mediator/shared/startup"
	"mediator/shared/store"
)

// bench holds the stack and everything measured.
type bench struct {
	stack *devserver.Stack
	// admin is Mediator's database as the server's administrative login: the bench's own
	// setup, CHECKPOINT, VACUUM and the statement statistics, which neither of Mediator's
	// roles may do; the handlers go through the stack's store, as the application role.
	admin   *pgxpool.Pool
	db      string // Mediator's database, whose statements the server-time figures sum
	counter *pgcount.Counter
	dur     time.Duration
	machine string
	// stealAtStart is the hypervisor's steal when the run began (cpuSteal).
	stealAtStart time.Duration
	rows         []row
	rates        map[string]float64 // for the ratios and the chart
	figures      map[string]float64 // results.json
	api          *api
	once         sync.Once
	// wakeRows keep the wake's samples for the idle-cost comparison.
	wakeRows []wakeRow
}

// row is one line of the table.
type row struct {
	measure, value          string
	p50, p95, p99           string
	roundTrips, txs, target string
}

func (b *bench) add(r row) { b.rows = append(b.rows, r) }

func (b *bench) rate(name string, v float64) {
	if b.rates == nil {
		b.rates = map[string]float64{}
	}
	b.rates[name] = v
}

// figure records one number of results.json, the figures a later run is compared with.
func (b *bench) figure(key string, v float64) {
	if b.figures == nil {
		b.figures = map[string]float64{}
	}
	b.figures[key] = v
}

// call is one handler call's answer, how long it took and what it sent to PostgreSQL.
type call struct {
	status int
	body   []byte
	took   time.Duration // as the caller saw it
	// server is the handler's own time (its Server-Timing), for a call over HTTP to another
	// process; 0 in process, where it is took.
	server  time.Duration
	queries int64
	txs     int64
}

// caller is a way to call the handlers: in this process (api) or over HTTP (httpAPI).
type caller interface {
	do(ctx context.Context, who auth.Principal, method, target string, body any) call
}

// do calls the stack's handlers, configured as the environment says.
func (b *bench) do(ctx context.Context, who auth.Principal, method, target string, body any) call {
	b.once.Do(func() { b.api = newAPI(withoutPush(b.stack.Deps())) })
	return b.api.do(ctx, who, method, target, body)
}

// withoutPush is d as a stack without push builds it: every section but push's measures the
// handlers as they were before it, and their hints would go to no one.
func withoutPush(d startup.Deps) startup.Deps {
	d.Hinter, d.Config.Push = nil, config.Push{}
	return d
}

// withLeaseTTL is the handlers as a function deployed with another LEASE_TTL_SECONDS would
// build them (so advertising another heartbeat cadence, LEASE_TTL/3), over the same pool: the
// store takes its lease and advert lengths from the settings it is built with.
func (b *bench) withLeaseTTL(ttl time.Duration) *api { return b.withLeaseTTLPush(ttl, false) }

// withLeaseTTLPush is withLeaseTTL, with the stack's push when push is true.
func (b *bench) withLeaseTTLPush(ttl time.Duration, push bool) *api {
	d := b.stack.Deps()
	if !push {
		d = withoutPush(d)
	}
	d.Config.LeaseTTL = ttl
	d.Store = store.New(d.Store.Pool(), startup.Settings(d.Config), d.Log)
	return newAPI(d)
}

// api is every HTTP function's handler, built from one set of Deps.
type api struct {
	fns map[string]httpapi.Handler
	gw  *gateway.Gateway
}

func newAPI(d startup.Deps) *api {
	fns := httpapi.Functions(d)
	return &api{fns: fns, gw: &gateway.Gateway{Routes: httpapi.Routes, Functions: fns}}
}

// do invokes a handler the way API Gateway does, counting what it sent to PostgreSQL.
func (a *api) do(ctx context.Context, who auth.Principal, method, target string, body any) call {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	ev, route := a.event(who, method, target, raw)
	ctx, counted := pgcount.WithCall(ctx)
	start := time.Now()
	resp, err := a.fns[route.Function](ctx, ev)
	took := time.Since(start)
	if err != nil {
		panic(err)
	}
	n := counted.Read()
	return call{status: resp.StatusCode, body: []byte(resp.Body), took: took, queries: n.Queries, txs: n.Txs}
}

// event builds the request API Gateway sends, by hand: in AWS that work is API Gateway's, not
// the function's, so it should not take the CPU the benchmark shares with PostgreSQL.
func (a *api) event(who auth.Principal, method, target string, body []byte) (events.APIGatewayV2HTTPRequest, httpapi.Route) {
	path := strings.SplitN(target, "?", 2)[0]
	route, params, ok := a.gw.Match(method, path)
	if !ok {
		panic("no route for " + method + " " + path)
	}
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: route.Key(), RawPath: path, PathParameters: params,
		Headers: map[string]string{"content-type": "application/json"}, Body: string(body),
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: route.Key(), RequestID: "bench",
			Authorizer: who.Authorizer(),
		},
	}, route
}

// samples collects one kind of call's latencies and costs, from many goroutines.
type samples struct {
	mu      sync.Mutex
	took    []time.Duration
	server  []time.Duration // the calls' own server times, where they came with one
	queries int64
	txs     int64
}

func (s *samples) add(c call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.took = append(s.took, c.took)
	if c.server > 0 {
		s.server = append(s.server, c.server)
	}
	s.queries += c.queries
	s.txs += c.txs
}

func (s *samples) n() int { return len(s.took) }

func (s *samples) pct(p float64) time.Duration { return percentile(s.took, p) }

// serverPct is the p-th percentile of the server's own times (0 without any).
func (s *samples) serverPct(p float64) time.Duration { return percentile(s.server, p) }

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func (s *samples) perCall() (float64, float64) {
	if len(s.took) == 0 {
		return 0, 0
	}
	return float64(s.queries) / float64(len(s.took)), float64(s.txs) / float64(len(s.took))
}

// latencyRow is a row for a kind of call: its rate, percentiles and cost per call (blank for
// calls made to another process, whose statements this one does not see).
func latencyRow(measure, value string, s *samples, target string) row {
	r := row{measure: measure, value: value, p50: ms(s.pct(0.50)), p95: ms(s.pct(0.95)), p99: ms(s.pct(0.99)), target: target}
	if q, tx := s.perCall(); q > 0 {
		r.roundTrips, r.txs = fmt.Sprintf("%.1f", q), fmt.Sprintf("%.1f", tx)
	}
	return r
}

// serverRow is latencyRow for the server's own times of the same calls.
func serverRow(measure string, s *samples, target string) row {
	return row{measure: measure, p50: ms(s.serverPct(0.50)), p95: ms(s.serverPct(0.95)), p99: ms(s.serverPct(0.99)), target: target}
}

func ms(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

// secs writes a whole-ish duration as the table does: "20 s", "0.5 s".
func secs(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }

func perSec(v float64, unit string) string { return fmt.Sprintf("%.0f %s/s", v, unit) }

// verdict is a target's outcome in the table.
func verdict(ok bool, target string) string {
	if ok {
		return "✓ " + target
	}
	return "✗ " + target
}

func (b *bench) table() string {
	var sb strings.Builder
	sb.WriteString("| measure | result | p50 | p95 | p99 | round trips / call | transactions / call | target |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range b.rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.measure, r.value, r.p50, r.p95, r.p99, r.roundTrips, r.txs, r.target)
	}
	return sb.String()
}

// cpuBusy is how much CPU time the whole machine has spent busy so far (PostgreSQL, the
// handlers and the simulated clients together: they share it), from /proc/stat; 0 where
// there is none. Time the hypervisor gave to another guest (steal) is not in it: see cpuSteal.
func cpuBusy() time.Duration {
	busy, _ := cpuTimes()
	return busy
}

// cpuSteal is how much CPU time the machine's hypervisor has kept from it so far: time this
// guest had work to run and another ran instead. On a shared virtual machine it comes in
// bursts, and every latency measured here stretches while it does.
func cpuSteal() time.Duration {
	_, steal := cpuTimes()
	return steal
}

func cpuTimes() (busy, steal time.Duration) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	fields := strings.Fields(strings.SplitN(string(raw), "\n", 2)[0])
	var b, st int64
	for i, f := range fields[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		switch {
		case i == 7:
			st = v
		case i != 3 && i != 4 && i < 7: // all but idle and iowait; guest time is already in user
			b += v
		}
	}
	const tick = time.Second / 100 // USER_HZ
	return time.Duration(b) * tick, time.Duration(st) * tick
}

// cpuPer is the machine's busy CPU time since began, per unit of work done.
func cpuPer(began time.Duration, n int64) string {
	if began == 0 || n == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f ms CPU each", float64((cpuBusy()-began).Microseconds())/1000/float64(n))
}

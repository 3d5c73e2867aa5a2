package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// fleetTTL is the default LEASE_TTL_SECONDS, set here whatever the environment says: the
// fleet heartbeats at the cadence a deployment advertises, a beat every 20 s.
const fleetTTL = 60 * time.Second

// fleet measures a large fleet at its real cadence (make bench-fleet): -fleet-nodes nodes
// heartbeat every LEASE_TTL/3 while a client submits one-step runs at 50 a second, which the
// nodes pick up from their heartbeats' answers and finish at once (started, then succeeded).
// Each node registers by its first real heartbeat, the first beats spread evenly over the
// first cadence; then -fleet-window is measured (by default 60 s, three cycles), every
// heartbeat in it a routine one. The server's time in the window is read from
// pg_stat_statements, by the statements' tags.
func (b *bench) fleet(ctx context.Context) error {
	server, stop, err := b.startFleetServer(ctx, fleetTTL)
	if err != nil {
		return err
	}
	defer stop()
	c := &cadenced{api: server, name: "fleet", nodes: *fleetN, need: "fleet",
		labels:  func(n int) []string { return []string{"fleet", fmt.Sprintf("rack-%d", n%100)} },
		cadence: fleetTTL / 3, rate: 50}
	c.schedule(*fleetW)
	fmt.Printf("… fleet: %d nodes registering over %s, then %s measured\n", c.nodes, secs(c.cadence), secs(*fleetW))
	spent := make(chan fleetWindow, 1)
	go func() { spent <- b.watchWindow(ctx, c, server) }()
	if err := c.run(ctx); err != nil {
		return err
	}
	w := <-spent
	if w.err != nil {
		return w.err
	}
	waits, runs, err := c.pickups(ctx, b)
	if err != nil {
		return err
	}
	b.fleetReport(c, w, waits, runs)
	return nil
}

// fleetWindow is what the server and the machine spent in the measured window.
type fleetWindow struct {
	server map[string]float64 // ms by statement tag
	cpu    time.Duration      // the machine's busy CPU time
	steal  time.Duration      // CPU time the hypervisor kept from the machine
	pg     pgWindow           // what PostgreSQL did besides the statements
	pool   poolStat           // the server process's pool in the window
	err    error
}

// watchWindow resets the server's statement times as the window opens and reads them, and the
// machine's CPU and what PostgreSQL did, as it closes.
func (b *bench) watchWindow(ctx context.Context, c *cadenced, server *httpAPI) fleetWindow {
	if !sleepUntil(ctx, c.from) {
		return fleetWindow{err: ctx.Err()}
	}
	if err := b.resetServerTime(ctx, b.db); err != nil {
		return fleetWindow{err: err}
	}
	cpu, steal := cpuTimes()
	watch, err := b.watchPostgres(ctx, c.to)
	if err != nil {
		return fleetWindow{err: err}
	}
	pool, err := server.pool(ctx)
	if err != nil {
		return fleetWindow{err: err}
	}
	if !sleepUntil(ctx, c.to) {
		return fleetWindow{err: ctx.Err()}
	}
	busy, stolen := cpuTimes()
	w := fleetWindow{cpu: busy - cpu, steal: stolen - steal}
	var st statementsByTag
	if st, w.err = b.statements(ctx, b.db); w.err == nil {
		w.server = st.times()
		w.pg, w.err = watch(ctx, st)
	}
	if w.err == nil {
		var end poolStat
		end, w.err = server.pool(ctx)
		w.pool = poolStat{Acquires: end.Acquires - pool.Acquires, Waited: end.Waited - pool.Waited, Wait: end.Wait - pool.Wait}
	}
	return w
}

func (b *bench) fleetReport(c *cadenced, w fleetWindow, waits *samples, runs int) {
	window := c.to.Sub(c.from).Seconds()
	var beatMS float64
	for tag, ms := range w.server {
		if strings.HasPrefix(tag, "heartbeat") {
			beatMS += ms
		}
	}
	// The runs submitted in the ramp are picked up at their nodes' second beats, in the window:
	// the rate counts the window's own runs (all picked up, as the nodes ran on until they
	// were), the server's time per run divides by the results the window saw.
	served := float64(waits.n()) / window
	beats, finished := float64(max(1, c.beats.n())), float64(max(1, c.succeeded.n()))
	f := func(key string, v float64) { b.figure("fleet_"+key, v) }
	f("nodes", float64(c.nodes))
	f("cadence_s", c.cadence.Seconds())
	f("window_s", window)
	f("heartbeats_per_s", float64(c.beats.n())/window)
	f("runs_per_s", served)
	f("machine_cpu_cores_busy", w.cpu.Seconds()/window)
	f("machine_cpu_cores_stolen", w.steal.Seconds()/window)
	f("heartbeat_p50_ms", msOf(c.beats.pct(0.50)))
	f("heartbeat_p99_ms", msOf(c.beats.pct(0.99)))
	f("heartbeat_server_p50_ms", msOf(c.beats.serverPct(0.50)))
	f("heartbeat_server_p99_ms", msOf(c.beats.serverPct(0.99)))
	f("idle_heartbeat_p50_ms", msOf(c.idle.pct(0.50)))
	f("idle_heartbeat_p99_ms", msOf(c.idle.pct(0.99)))
	f("generator_lag_p50_ms", msOf(c.lag.pct(0.50)))
	f("generator_lag_p99_ms", msOf(c.lag.pct(0.99)))
	f("server_ms_per_s", total(w.server)/window)
	f("server_ms_per_heartbeat", beatMS/beats)
	f("server_ms_per_run_besides_heartbeats", (total(w.server)-beatMS)/finished)
	f("submit_p50_ms", msOf(c.submit.pct(0.50)))
	f("submit_p99_ms", msOf(c.submit.pct(0.99)))
	f("submit_server_p99_ms", msOf(c.submit.serverPct(0.99)))
	f("succeeded_server_p99_ms", msOf(c.succeeded.serverPct(0.99)))
	f("checkpoints", float64(w.pg.checkpoints))
	f("started_p50_ms", msOf(c.started.pct(0.50)))
	f("started_p99_ms", msOf(c.started.pct(0.99)))
	f("succeeded_p50_ms", msOf(c.succeeded.pct(0.50)))
	f("succeeded_p99_ms", msOf(c.succeeded.pct(0.99)))
	f("pickup_p50_ms", msOf(waits.pct(0.50)))
	f("pickup_p99_ms", msOf(waits.pct(0.99)))

	beatTarget := func(s *samples) string { return verdict(s.pct(0.99) < 50*time.Millisecond, "p99 < 50 ms") }
	serverTarget := func(s *samples) string { return verdict(s.serverPct(0.99) < 10*time.Millisecond, "p99 < 10 ms") }
	b.add(row{measure: fmt.Sprintf("fleet: %s nodes heartbeating every %s as advertised (LEASE_TTL %s), runs submitted at %.0f/s; %.0f s measured after a %s ramp in which each node registered by its own first heartbeat",
		thousands(c.nodes), secs(c.cadence), secs(fleetTTL), c.rate, window, secs(c.cadence)),
		value: fmt.Sprintf("%.0f heartbeats/s (nominal %.0f), %.1f runs/s of the window's picked up, %.2f cores busy (the whole machine), %.2f cores stolen by the hypervisor",
			float64(c.beats.n())/window, float64(c.nodes)/c.cadence.Seconds(), served, w.cpu.Seconds()/window, w.steal.Seconds()/window)})
	b.add(latencyRow(fmt.Sprintf("  · heartbeat, all (%d), as the nodes saw it", c.beats.n()), "", &c.beats, beatTarget(&c.beats)))
	b.add(serverRow("    · the handler's own time (its Server-Timing)", &c.beats, serverTarget(&c.beats)))
	b.add(latencyRow(fmt.Sprintf("  · heartbeat with nothing new (%d), as the nodes saw it", c.idle.n()), "", &c.idle, beatTarget(&c.idle)))
	b.add(serverRow("    · the handler's own time", &c.idle, serverTarget(&c.idle)))
	b.add(latencyRow(fmt.Sprintf("  · the load generator: how late its timers fired (%d beats and arrivals)", c.lag.n()), "", &c.lag, ""))
	b.add(row{measure: "  · server time per heartbeat (pg_stat_statements: the statements tagged heartbeat, over the window's heartbeats)",
		value: fmt.Sprintf("%.3f ms", beatMS/beats)})
	b.add(row{measure: "  · server time per run, besides heartbeats (every other statement, over the succeeded reports in the window)",
		value: fmt.Sprintf("%.3f ms", (total(w.server)-beatMS)/finished)})
	b.add(row{measure: "  · server time in the window, all statements", value: fmt.Sprintf("%.0f ms per s", total(w.server)/window)})
	for _, t := range topTags(w.server, 8) {
		name := "/* " + t + " */"
		if t == "" {
			name = "untagged (BEGIN, COMMIT)"
		}
		b.add(row{measure: "    · " + name, value: fmt.Sprintf("%.0f ms per s", w.server[t]/window)})
	}
	waitedShare, meanWait := 0.0, time.Duration(0)
	if w.pool.Acquires > 0 {
		waitedShare = float64(w.pool.Waited) / float64(w.pool.Acquires)
	}
	if w.pool.Waited > 0 {
		meanWait = w.pool.Wait / time.Duration(w.pool.Waited)
	}
	f("pool_acquires_waited_share", waitedShare)
	b.add(row{measure: fmt.Sprintf("  · the server's pool (DB_MAX_CONNS %d, -fleet-conns, by default two per core: the connections RDS Proxy gives the database, which it stands for): acquires that found every connection taken", *fleetC),
		value: fmt.Sprintf("%.1f %% of %d, %s waited on average by those", 100*waitedShare, w.pool.Acquires, meanWait.Round(10*time.Microsecond))})
	for _, r := range w.pg.rows() {
		b.add(r)
	}
	b.add(latencyRow("  · submit", "", &c.submit, ""))
	b.add(serverRow("    · the handler's own time", &c.submit, ""))
	b.add(latencyRow("  · result: started", "", &c.started, ""))
	b.add(serverRow("    · the handler's own time", &c.started, ""))
	b.add(latencyRow("  · result: succeeded (settles, wakes)", "", &c.succeeded, ""))
	b.add(serverRow("    · the handler's own time", &c.succeeded, ""))
	value := fmt.Sprintf("%d runs (half a cadence, %s, on an idle fleet; more as it fills: see pickup.go)", waits.n(), secs(c.cadence/2))
	if waits.n() < runs {
		value += fmt.Sprintf("; %d of %d not started when the nodes stopped", runs-waits.n(), runs)
	}
	b.add(row{measure: "  · pickup: placement → started", value: value,
		p50: ms(waits.pct(0.50)), p95: ms(waits.pct(0.95)), p99: ms(waits.pct(0.99))})
}

// topTags are the n tags the server spent most time on, most first.
func topTags(byTag map[string]float64, n int) []string {
	tags := make([]string, 0, len(byTag))
	for t := range byTag {
		tags = append(tags, t)
	}
	sort.Slice(tags, func(i, j int) bool { return byTag[tags[i]] > byTag[tags[j]] })
	return tags[:min(n, len(tags))]
}

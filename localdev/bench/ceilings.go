package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"mediator/localdev/devserver"
	"mediator/localdev/localpg"
)

// pgbench measures what the same server does with the simplest transactions there are, and
// the server's time per transaction, as a run's is measured (serverTime), to compare the two.
// TPC-B (five statements: three updates, a select, an insert) is about the work of each of a
// run's durable writes: at one client, the ceiling of a run alone (one call at a time); at 8,
// as many as the lifecycles' clients, theirs. Simple-update (three statements, one row
// updated) is a reference line only: one row against a run's dozen is no ceiling for it.
func (b *bench) pgbench(ctx context.Context) error {
	bin, err := pgbenchBinary()
	if err != nil {
		return err
	}
	const db = "pgbench_bench"
	dbURL, err := b.database(ctx, db)
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, bin, "-i", "-q", "-s", "10", dbURL).CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %w: %s", err, out)
	}
	for _, mode := range []struct {
		name, builtin, key string
		clients            int
	}{
		{"TPC-B", "tpcb-like", "tpcb_alone", 1},
		{"TPC-B", "tpcb-like", "tpcb", clients},
		{"simple-update", "simple-update", "simple_update", clients},
	} {
		if err := b.resetServerTime(ctx, db); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, bin, "-n", "-c", strconv.Itoa(mode.clients), "-j", strconv.Itoa(min(2, mode.clients)),
			"-T", strconv.Itoa(int(b.dur.Seconds())), "-b", mode.builtin, dbURL).CombinedOutput()
		if err != nil {
			return fmt.Errorf("pgbench %s: %w: %s", mode.name, err, out)
		}
		tps, okTPS := pgbenchFigure(out, `tps = ([0-9.]+)`)
		txs, okTxs := pgbenchFigure(out, `number of transactions actually processed: ([0-9]+)`)
		if !okTPS || !okTxs || txs == 0 {
			return fmt.Errorf("pgbench %s printed no tps or transaction count:\n%s", mode.name, out)
		}
		server, err := b.serverTime(ctx, db)
		if err != nil {
			return err
		}
		perTx := total(server) / txs
		who := fmt.Sprintf("%d clients", mode.clients)
		if mode.clients == 1 {
			who = "1 client"
		}
		b.rate(fmt.Sprintf("pgbench %s %d", mode.name, mode.clients), tps)
		b.figure("pgbench_"+mode.key+"_tps", tps)
		b.figure("pgbench_"+mode.key+"_server_ms_per_tx", perTx)
		b.add(row{measure: fmt.Sprintf("ceiling: pgbench %s (%s, same server)", mode.name, who),
			value: perSec(tps, "tx") + fmt.Sprintf(", %.3f ms server time each", perTx)})
	}
	return nil
}

// pgbenchFigure reads the number pattern's group matches in pgbench's report.
func pgbenchFigure(out []byte, pattern string) (float64, bool) {
	m := regexp.MustCompile(pattern).FindSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}

func pgbenchBinary() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	// Beside the server a local cluster runs from: a glob's last match put 9.6 after 17.
	dir, err := localpg.BinDir()
	if err != nil {
		return "", fmt.Errorf("pgbench not found (it comes with the PostgreSQL server package): %w", err)
	}
	return filepath.Join(dir, "pgbench"), nil
}

// database creates (afresh) a database on the benchmark's server and returns its URL.
func (b *bench) database(ctx context.Context, name string) (string, error) {
	return devserver.EnsureDatabase(ctx, b.stack.AdminURL, name, true)
}

// noop is River's unit of work here: nothing, so what is measured is the queue.
type noop struct{}

func (noop) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noop]
	worked *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noop]) error {
	w.worked.Add(1)
	return nil
}

// river measures River (riverpgxv5) on the same server: 8 goroutines inserting one no-op job
// per call (insert rate), then the same with a client working them (end-to-end rate).
func (b *bench) river(ctx context.Context) error {
	dbURL, err := b.database(ctx, "river_bench")
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dbURL+"&pool_max_conns=16")
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	ins := &samples{}
	cpu := cpuBusy()
	n, err := b.insertFor(ctx, inserter, ins)
	if err != nil {
		return err
	}
	rate := float64(n) / b.dur.Seconds()
	b.rate("river insert", rate)
	b.figure("river_insert_jobs_per_s", rate)
	b.add(latencyRow("River: insert one no-op job per call (8 goroutines)", perSec(rate, "jobs")+", "+cpuPer(cpu, int64(n)), ins, ""))

	// The insert-only run left its jobs behind: the end-to-end run starts from an empty table.
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}
	var worked atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{worked: &worked})
	// River's defaults fetch at most every 100 ms; tuned down so its end-to-end rate is not
	// held back by waiting.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers:       workers,
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	before, cpu := worked.Load(), cpuBusy()
	e2e := &samples{}
	if _, err := b.insertFor(ctx, client, e2e); err != nil {
		return err
	}
	jobs := worked.Load() - before
	cost := cpuPer(cpu, jobs)
	rate = float64(jobs) / b.dur.Seconds()
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = client.Stop(stop)
	b.rate("river e2e", rate)
	b.figure("river_end_to_end_jobs_per_s", rate)
	b.add(row{measure: "River: insert and work no-op jobs (8 inserters, 100 workers)", value: perSec(rate, "jobs") + ", " + cost})
	return nil
}

func (b *bench) insertFor(ctx context.Context, client *river.Client[pgx.Tx], s *samples) (int, error) {
	var wg sync.WaitGroup
	var done atomic.Int64
	var failure atomic.Value
	end := time.Now().Add(b.dur)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				start := time.Now()
				if _, err := client.Insert(ctx, noop{}, nil); err != nil {
					failure.Store(err)
					return
				}
				s.add(call{took: time.Since(start), queries: 1, txs: 1})
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := failure.Load().(error); ok {
		return 0, err
	}
	return int(done.Load()), nil
}

// ratios say how Mediator compares with the alternatives and the ceiling, measured above.
func (b *bench) ratios() {
	r := b.rates
	add := func(measure, a, over string, scale float64, target string) {
		if r[a] == 0 || r[over] == 0 {
			return // a section that was not run (-only)
		}
		v := r[a] * scale / r[over]
		if target != "" {
			target = verdict(v >= b.goal(target), target)
		}
		b.add(row{measure: measure, value: fmt.Sprintf("%.2f", v), target: target})
	}
	add("ratio: submit 201 / River insert", "submit 201", "river insert", 1, "≥ 0.6")
	add("ratio: lifecycle / River end-to-end", "lifecycle", "river e2e", 1, "≥ 0.25")
	add(fmt.Sprintf("ratio: lifecycle × %.1f transactions / pgbench TPC-B at %d clients (how near the server's ceiling)", r["lifecycle tx"], clients),
		"lifecycle", fmt.Sprintf("pgbench TPC-B %d", clients), r["lifecycle tx"], "")
	// A run's server time against TPC-B's per transaction, each at its own concurrency: a run
	// alone is one call at a time, as TPC-B at one client; the lifecycles have 8 clients, as
	// TPC-B at 8, whose lock and CPU waits are in both. A run makes three durable writes
	// (submit, started, succeeded), each at least a TPC-B transaction's work, so 3 is par and
	// no run can come under it: the goal is 2 per durable write, 6 for the run, and is set
	// for a run alone, whose server time has nothing but its own work in it.
	f := b.figures
	for _, c := range []struct {
		key, tpcb string
		goal      float64
	}{
		{"alone", "tpcb_alone", 3 * 2},
		{spareFleet.key, "tpcb", 0},
		{waitedFleet.key, "tpcb", 0},
	} {
		run, tx := f[c.key+"_server_ms_per_run"], f["pgbench_"+c.tpcb+"_server_ms_per_tx"]
		if run == 0 || tx == 0 {
			continue // a section that was not run (-only)
		}
		v := run / tx
		b.figure(c.key+"_server_ms_per_run_ratio_to_tpcb", v)
		target := ""
		if c.goal > 0 {
			target = verdict(v <= c.goal, fmt.Sprintf("≤ %g (%g per durable write)", c.goal, c.goal/3))
		}
		b.add(row{measure: fmt.Sprintf("ratio: %s server time per run / pgbench TPC-B server time per transaction (%s)",
			strings.ReplaceAll(c.key, "_", " "), map[bool]string{true: "1 client", false: fmt.Sprintf("%d clients", clients)}[c.tpcb == "tpcb_alone"]),
			value: fmt.Sprintf("%.2f", v), target: target})
	}
}

// goal reads the number out of a target such as "≥ 0.6".
func (b *bench) goal(target string) float64 {
	var v float64
	fmt.Sscanf(strings.TrimPrefix(target, "≥ "), "%g", &v)
	return v
}

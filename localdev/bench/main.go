// Command bench measures Mediator where users feel it — what a submit costs, how many runs a
// fleet turns over per second, what a wake costs at any queue depth — against the ceilings of
// the PostgreSQL it runs on (pgbench) and against River on the same server, in one run. It
// prints one table and writes it as Markdown, its figures as JSON and a PNG chart (make bench).
// With -fleet it measures a large fleet heartbeating at its real cadence instead (make
// bench-fleet).
//
// It is its own module so River and the chart's font stay out of the Lambda module.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"mediator/localdev/devserver"
	"mediator/localdev/pgcount"
)

var (
	outDir  = flag.String("out", "out", "where results.md, results.json and results.png go (fleet.md and fleet.json with -fleet)")
	seconds = flag.Int("seconds", 10, "length of each throughput section")
	cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	only    = flag.String("only", "", "run only these sections, comma-separated (alone,wake,submit,pickup,push,lifecycle,lifecycle-queued,pgbench,river)")
	fleet   = flag.Bool("fleet", false, "instead of the sections, a fleet of -fleet-nodes heartbeating at the advertised cadence while runs flow (make bench-fleet)")
	fleetN  = flag.Int("fleet-nodes", 10000, "how many nodes -fleet simulates")
	fleetW  = flag.Duration("fleet-window", 60*time.Second, "how long -fleet measures, after one heartbeat cycle of ramp")
	fleetC  = flag.Int("fleet-conns", 2*runtime.NumCPU(), "with -fleet, the server process's connections to PostgreSQL: RDS Proxy's to the database, which it stands for (startFleetServer)")
	// The fleet's handlers run in a process of their own (fleetserver.go): this flag makes
	// the bench that process. Not for use by hand.
	fleetServer = flag.Bool("fleet-server", false, "serve the fleet's handlers over HTTP (the process -fleet starts)")
	fleetTrace  = flag.String("fleet-trace", "", "with -fleet, write a Go execution trace of the server process here (go tool trace)")
)

// benchDatabase is Mediator's database on the bench cluster.
const benchDatabase = "mediator_bench"

func main() {
	flag.Parse()
	if *fleetServer {
		if err := serveFleet(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: the fleet's server:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	began := time.Now()
	counter := &pgcount.Counter{}
	prof := &profiler{}
	// The handlers log every request at info; the benchmark keeps warnings and errors, so the
	// log's formatting does not take the CPU it shares with PostgreSQL.
	quiet := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	os.Setenv("DB_MAX_CONNS", "16")
	tracer := tracers{counter}
	if profiling() {
		tracer = append(tracer, prof)
	}
	s, err := devserver.Open(ctx, devserver.Options{Cluster: "bench", Database: benchDatabase, Fresh: true, Log: quiet,
		Tracer: tracer, Settings: statementSettings, Push: &devserver.LocalPush{}})
	defer s.Stop()
	if err != nil {
		return err
	}
	admin, err := pgxpool.New(ctx, s.AdminURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	prof.pool = admin
	b := &bench{stack: s, admin: admin, counter: counter, dur: time.Duration(*seconds) * time.Second, stealAtStart: cpuSteal()}
	if err := b.checkStatements(ctx); err != nil {
		return err
	}
	b.machine = machine(b.pgVersion(ctx))
	fmt.Printf("Mediator benchmark on %s\n\n", b.machine)
	if *fleet {
		prof.reset(ctx)
		if err := b.fleet(ctx); err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		prof.report(ctx, "fleet")
		fmt.Printf("… push\n")
		if err := b.push(ctx, 200); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		return b.write("fleet", "make bench-fleet", began)
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"alone", b.alone}, // first: one call at a time on a quiet server
		{"wake", b.wakes},  // it needs the queue to itself
		{"submit", b.submits},
		{"pickup", b.pickup},
		{"push", func(ctx context.Context) error { return b.push(ctx, 20) }},
		{"lifecycle", b.lifecycle},
		{"lifecycle-queued", b.lifecycleQueued},
		{"pgbench", b.pgbench},
		{"river", b.river},
	}
	for _, st := range steps {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), st.name) {
			continue
		}
		prof.reset(ctx)
		fmt.Printf("… %s\n", st.name)
		if err := st.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		prof.report(ctx, st.name)
	}
	b.ratios()
	if err := b.write("results", "make bench", began); err != nil {
		return err
	}
	return writeChart(filepath.Join(*outDir, "results.png"), b)
}

// write prints the table and writes it as <name>.md, and the figures as <name>.json: one flat
// object of numbers, for comparing runs.
func (b *bench) write(name, target string, began time.Time) error {
	table := b.table()
	fmt.Println()
	fmt.Println(table)
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	// On a shared virtual machine the hypervisor's steal is what most moves the figures
	// between runs: the share it took says how much to trust this one.
	stolen := (cpuSteal() - b.stealAtStart).Seconds() / time.Since(began).Seconds() / float64(runtime.NumCPU())
	b.figure("machine_cpu_stolen_share", stolen)
	md := fmt.Sprintf("Measured %s on %s (`%s`, %s; the hypervisor kept %.0f %% of the cores' time from the machine).\n\n%s",
		time.Now().UTC().Format("2006-01-02"), b.machine, target, time.Since(began).Round(time.Second), 100*stolen, table)
	if err := os.WriteFile(filepath.Join(*outDir, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	for k, v := range b.figures {
		b.figures[k] = math.Round(v*1e4) / 1e4
	}
	raw, err := json.MarshalIndent(b.figures, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*outDir, name+".json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s.md and %s.json in %s in %s\n", name, name, *outDir, time.Since(began).Round(time.Second))
	return nil
}

func (b *bench) pgVersion(ctx context.Context) string {
	var v string
	if err := b.stack.Store.Pool().QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "PostgreSQL ?"
	}
	return "PostgreSQL " + strings.Fields(v)[0]
}

// machine describes where the numbers come from.
func machine(pg string) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s", runtime.NumCPU(), cpu, runtime.Version(), pg)
}

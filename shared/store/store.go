// Package store is Mediator's one pgx store: all SQL, every transaction, and WakeQueued.
//
// Concurrency safety lives in PostgreSQL, not here: every invariant is a named constraint or
// a conditional write (DESIGN.md lists them), and this package only ever asks the database to
// do something "if it is still true". There are no advisory locks and no mutexes.
//
// The SQL is in sql/*.sql (sql.go says how it is laid out and loaded), called through pgx by
// hand rather than through generated code such as sqlc's: most statements are one
// data-modifying CTE that does a whole transition in one round trip, several are built per
// width or per filter, and the hot ones bind named arguments through a cached rewrite
// (named.go) — none of which a generator would leave as plain, or as cheap.
//
// Layout: one file per concern (submit, runs, queue, nodes, fleet, results, cancel, leases,
// settle, wake, reap), the run lock and the lock order every writer keeps in lock.go, the
// domain types in types.go, errors and their translation in errors.go, transactions in tx.go.
package store

import (
	"context"
	"fmt"
	"log/slog"
	"mediator/shared/wire"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the database, and the settings its decisions depend on.
type Store struct {
	pool *pgxpool.Pool
	set  Settings
	log  *slog.Logger
	// bound holds the statements as this store sends them: s.bound.wakeStart, never to be
	// confused with the package's wakeStartStmt.
	bound bound
}

// bound are the statements a Store writes its settings into, at New: each is the package-level
// statement of its name with the setting written in. They are a field of their own so that a
// statement as this store sends it is never mistaken for the package's text, which reads the
// setting as a parameter: both are a statement, and a call of the wrong one compiles, to fail
// at run time for want of the parameter.
type bound struct {
	// The wake's statements that read heads, with this store's starvation bound written in;
	// wake_start twice: for a wake that holds no node, and for one that does; and its twin
	// read inside a report's transaction.
	wakeStart, wakeStartHolding, reportWakeStart, wakeNextOfShape, wakePromoteProtected statement
	// Why a run waits: its read of the heads (Store.ExplainWaiting).
	waiting statement
}

// newBound writes set into the statements that take it as a literal (withStarvation says why).
func newBound(set Settings) bound {
	return bound{
		wakeStart:            withNoneHeld(withStarvation(wakeStartStmt, set.Starvation)),
		wakeStartHolding:     withStarvation(wakeStartStmt, set.Starvation),
		reportWakeStart:      withStarvation(reportWakeStartStmt, set.Starvation),
		wakeNextOfShape:      withStarvation(wakeNextOfShapeStmt, set.Starvation),
		wakePromoteProtected: withStarvation(wakePromoteProtectedStmt, set.Starvation),
		waiting:              withStarvation(waitingStmt, set.Starvation),
	}
}

// Settings are the durations and limits the store decides by. The store takes them as given;
// shared/config validated them.
type Settings struct {
	LeaseTTL    time.Duration
	AdvertTTL   time.Duration
	CancelGrace time.Duration
	Starvation  time.Duration
	RetireAfter time.Duration
	MaxRunWidth int
	// RetentionDays: runs that ended longer ago are deleted by the reaper; 0 keeps them all.
	RetentionDays int
	// QuarantineAfter: this many consecutive infrastructure failures quarantine a node (0 is
	// the default, DefaultQuarantineAfter).
	QuarantineAfter int
	// MaxHoldSeconds: the longest a hold lasts, and the furthest from now an extend moves its
	// end (0 is the default, wire.DefaultMaxHoldSeconds).
	MaxHoldSeconds int
	// HoldExpiringLead: how long before a placed hold's end the reaper warns of it, event
	// hold_expiring; 0 warns of none.
	HoldExpiringLead time.Duration
}

func (s Settings) maxHold() int {
	if s.MaxHoldSeconds <= 0 {
		return wire.DefaultMaxHoldSeconds
	}
	return s.MaxHoldSeconds
}

// MaxHold is MaxHoldSeconds as it applies.
func (s *Store) MaxHold() int { return s.set.maxHold() }

// DefaultQuarantineAfter is NODE_QUARANTINE_AFTER's default.
const DefaultQuarantineAfter = 3

func (s Settings) quarantineAfter() int {
	if s.QuarantineAfter <= 0 {
		return DefaultQuarantineAfter
	}
	return s.QuarantineAfter
}

// PoolParams say how to connect.
type PoolParams struct {
	URL              string
	AppName          string
	MaxConns         int32
	StatementTimeout time.Duration
	LockTimeout      time.Duration
	IdleInTxTimeout  time.Duration
	// BeforeConnect, when set, fills in credentials for each new connection (an RDS IAM
	// token is only good for 15 minutes, so it is minted per connection, not per process).
	BeforeConnect func(context.Context, *pgx.ConnConfig) error
	// Tracer sees every statement (benchmarks count round trips with it).
	Tracer pgx.QueryTracer
	// ViaProxy: the connection goes through RDS Proxy. It refuses statement_timeout and its
	// kind as startup parameters, and pins a client to one database connection on a named
	// prepared statement; so nothing is sent at startup (the proxy's InitQuery sets the
	// timeouts) and statements are described once and sent unnamed, still one round trip.
	ViaProxy bool
}

// jitOff: every statement of the store is a short lookup or write, and JIT compiling one costs
// tens of milliseconds; PostgreSQL compiles whatever its estimates put past jit_above_cost,
// and an estimate of rows a LIMIT never reads (the wake's runs behind a head, the reaper's
// outage grace) can put a sub-millisecond statement there. Off in every session: in the startup
// packet here, in the proxy's InitQuery through RDS Proxy (infra/database.yaml).
const jitOff = "off"

// Connect opens a pool sized for Lambda: one environment serves one request at a time, so one
// connection is enough and a thousand environments do not open a thousand idle spares.
func Connect(ctx context.Context, p PoolParams) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(p.URL)
	if err != nil {
		// The URL may carry a password: say which setting is wrong, never echo it.
		return nil, fmt.Errorf("store: the database URL cannot be parsed")
	}
	cfg.MaxConns = max(p.MaxConns, 1)
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = 5 * time.Minute
	if p.ViaProxy {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	} else {
		// Direct connections take the settings in the startup packet: no SET round trip.
		rp := cfg.ConnConfig.RuntimeParams
		rp["application_name"] = orDefault(p.AppName, "mediator")
		rp["jit"] = jitOff
		for name, d := range map[string]time.Duration{
			"statement_timeout": p.StatementTimeout, "lock_timeout": p.LockTimeout,
			"idle_in_transaction_session_timeout": p.IdleInTxTimeout,
		} {
			if d > 0 {
				rp[name] = strconv.FormatInt(d.Milliseconds(), 10)
			}
		}
	}
	cfg.BeforeConnect = p.BeforeConnect
	cfg.ConnConfig.Tracer = p.Tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open the pool: %w", err)
	}
	return pool, nil
}

// New wraps an open pool.
func New(pool *pgxpool.Pool, set Settings, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{pool: pool, set: set, log: log, bound: newBound(set)}
}

// Pool is the underlying pool, for what has no method here: the tests' and the benchmarks'
// own reads and writes around the store. Mediator itself goes through the store's methods.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"mediator/shared/wire"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The store's SQL lives in sql/*.sql, one file per concern. Each statement sits under a
// "-- name: <name>" header (River's layout) and opens with a /* tag */ comment, which names it
// in pg_stat_statements and in the store's errors. A rule that several statements share is
// written once in sql/rules.sql under "-- fragment: <name>(<alias>, ...)" and used as
// {{name arg ...}}, its aliases replaced by the arguments; the states and the store's limits
// come from the Go constants that define them, as {{QUEUED}} or {{walkFree}}.
//
// Everything is expanded once, at package init, and a statement is fetched by name into a
// package-level variable named for it with a Stmt suffix (list_runs: listRunsStmt): a name,
// fragment or constant that does not exist panics there, so a typo stops every function at
// start-up instead of failing one request in production. The statements a Store writes its
// settings into are its own, s.bound (store.go), never the package's text they come from.
//
// testdata/sql holds every statement as it is sent, expanded, one file each, slots filled and
// settings written in (TestSQLGolden): a change to a fragment shows in review in every statement
// it reaches. `go test ./shared/store -run TestSQLGolden -update` rewrites them.
//
// A statement whose text depends on the request declares the part that does as a slot:
// "-- name: list_runs(filter)" leaves {{filter}} to its caller, who fetches it with stmtToFill
// and writes the slot per use (fill), in the same fragments, expanded the same way; the rest
// of the statement is expanded at init like any other.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// sqlConstants are the Go values statements may name: each is defined once, in Go.
var sqlConstants = map[string]string{
	"QUEUED": quote(wire.Queued), "RUNNING": quote(wire.Running), "SUCCEEDED": quote(wire.Succeeded),
	"FAILED": quote(wire.Failed), "CANCELLED": quote(wire.Cancelled), "PENDING": quote(wire.Pending), "SKIPPED": quote(wire.Skipped),
	"IDLE": quote(wire.NodeIdle), "LEASED": quote(wire.NodeLeased), "DRAINING": quote(wire.NodeDraining), "OFFLINE": quote(wire.NodeOffline),
	"HEALTHY": quote(wire.HealthHealthy), "SUSPECT": quote(wire.HealthSuspect), "QUARANTINED": quote(wire.HealthQuarantined),
	"by_system": quote(wire.QuarantinedBySystem), "by_self": quote(wire.QuarantinedBySelf),
	"KIND_HEALTH_CHECK": quote(wire.KindHealthCheck), "KIND_HOLD": quote(wire.KindHold), "SYSTEM_OWNER": quote(wire.SystemOwner),
	"CHECK_ROLE": quote(wire.HealthCheckRole), "NODE_ID_LABEL_PREFIX": quote(wire.NodeIDLabelKey + "="),
	"CHECK_TIMEOUT":    strconv.Itoa(wire.HealthCheckTimeoutSeconds),
	"FINAL_RUN_STATES": quoteAll(wire.FinalRunStates), "reason_cancelled": quote(wire.ReasonCancelled),
	"reason_step_failed": quote(wire.ReasonStepFailed), "MAX_PRIORITY": strconv.Itoa(wire.MaxPriority),
	"STANDING_AVAILABLE": quote(wire.StandingAvailable), "STANDING_BUSY": quote(wire.StandingBusy),
	"STANDING_HELD": quote(wire.StandingHeld), "STANDING_CHECKING": quote(wire.StandingChecking),
	"STANDING_DRAINING": quote(wire.StandingDraining), "STANDING_QUARANTINED": quote(wire.StandingQuarantined),
	"STANDING_OFFLINE": quote(wire.StandingOffline),
	"busyRunsShown":    strconv.Itoa(busyRunsShown), "maxWalkNodes": strconv.Itoa(maxWalkNodes), "walkFree": strconv.Itoa(walkFree), "startNodes": strconv.Itoa(startNodes),
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// quoteAll is a list of values for IN (...).
func quoteAll(list []string) string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = quote(s)
	}
	return strings.Join(out, ", ")
}

// statement is one named SQL statement, expanded.
type statement struct {
	name string
	sql  string
}

var (
	sqlOnce      sync.Once
	sqlByName    map[string]string
	sqlSlots     map[string][]string // the slots of the statements that have any
	sqlFragments map[string]fragment
	sqlUsed      = map[string]bool{}
	sqlMu        sync.Mutex
)

func loadSQL() { sqlByName, sqlSlots, sqlFragments = mustLoadSQL(sqlFiles) }

// stmt is the statement called name. It panics when there is none, or when it has slots to
// fill (stmtToFill): it is called from package-level variables, so at init.
func stmt(name string) statement {
	text := loaded(name)
	if len(sqlSlots[name]) > 0 {
		panic(fmt.Sprintf("store: statement %s has slots %v to fill: fetch it with stmtToFill", name, sqlSlots[name]))
	}
	return statement{name: name, sql: text}
}

// unfilled is a statement with slots its caller writes per use.
type unfilled struct {
	name  string
	slots []string
	sql   string // expanded, but for its slots
}

// stmtToFill is the statement called name, which has slots. It panics, at init, when there is
// none or it has no slot.
func stmtToFill(name string) unfilled {
	text := loaded(name)
	if len(sqlSlots[name]) == 0 {
		panic(fmt.Sprintf("store: statement %s has no slot: fetch it with stmt", name))
	}
	return unfilled{name: name, slots: sqlSlots[name], sql: text}
}

// fill writes each slot's text (fragments and constants as anywhere else) and expands it. It
// panics when a slot is left out or a name in the text does not exist.
func (u unfilled) fill(values map[string]string) statement {
	for _, slot := range u.slots {
		if _, ok := values[slot]; !ok {
			panic(fmt.Sprintf("store: statement %s: slot %s not filled", u.name, slot))
		}
	}
	text := placeholderRE.ReplaceAllStringFunc(u.sql, func(ph string) string {
		m := placeholderRE.FindStringSubmatch(ph)
		if v, ok := values[m[1]]; ok && m[2] == "" {
			return v
		}
		return ph
	})
	return dynamic(u.name, text)
}

// loaded is the expanded text of the statement called name, noted as used.
func loaded(name string) string {
	sqlOnce.Do(loadSQL)
	text, ok := sqlByName[name]
	if !ok {
		panic(fmt.Sprintf("store: no SQL statement named %q in sql/*.sql", name))
	}
	sqlMu.Lock()
	sqlUsed[name] = true
	sqlMu.Unlock()
	return text
}

var (
	headerRE      = regexp.MustCompile(`^-- (name|fragment): ([A-Za-z_][A-Za-z0-9_]*)(?:\(([^)]*)\))?\s*$`)
	placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)((?:\s+@?[A-Za-z_][A-Za-z0-9_]*)*)\s*\}\}`)
)

type fragment struct {
	params []string
	body   string
	// passedOn finds an alias handed on to a fragment inside this one ("{{queue_order r}}");
	// qualified finds an alias qualifying a column ("r.created_at"). Compiled once, at load.
	passedOn, qualified *regexp.Regexp
}

// mustLoadSQL reads every file, then expands every statement, leaving its slots as they are.
func mustLoadSQL(files fs.FS) (map[string]string, map[string][]string, map[string]fragment) {
	statements, slots, fragments, err := parseSQL(files)
	if err == nil {
		for name, text := range statements {
			if statements[name], err = expand(text, fragments, slots[name], 0); err != nil {
				err = fmt.Errorf("statement %s: %w", name, err)
				break
			}
		}
	}
	if err != nil {
		panic("store: sql/*.sql: " + err.Error())
	}
	return statements, slots, fragments
}

func parseSQL(files fs.FS) (map[string]string, map[string][]string, map[string]fragment, error) {
	statements, slots, fragments := map[string]string{}, map[string][]string{}, map[string]fragment{}
	paths, err := fs.Glob(files, "sql/*.sql")
	if err != nil {
		return nil, nil, nil, err
	}
	sort.Strings(paths)
	for _, path := range paths {
		b, err := fs.ReadFile(files, path)
		if err != nil {
			return nil, nil, nil, err
		}
		kind, name, params, body := "", "", "", []string{}
		flush := func() error {
			if kind == "" {
				return nil
			}
			// Whole-line comments are for the file's reader: a statement is sent from its tag
			// on, and a fragment is spliced into the middle of a line.
			body = slices.DeleteFunc(body, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "--") })
			text := strings.TrimSpace(strings.Join(body, "\n"))
			if kind == "name" && !strings.HasPrefix(text, "/* ") {
				return fmt.Errorf("%s: statement %s does not open with its /* tag */", path, name)
			}
			if _, dup := statements[name]; dup {
				return fmt.Errorf("%s: %s defined twice", path, name)
			}
			if _, dup := fragments[name]; dup {
				return fmt.Errorf("%s: %s defined twice", path, name)
			}
			var ps []string
			for _, p := range strings.Split(params, ",") {
				if p = strings.TrimSpace(p); p != "" {
					ps = append(ps, p)
				}
			}
			if kind == "name" {
				statements[name] = text
				if len(ps) > 0 {
					slots[name] = ps
				}
				return nil
			}
			f := fragment{params: ps, body: text}
			if len(ps) > 0 {
				f.passedOn = regexp.MustCompile(`(\s)(` + strings.Join(ps, "|") + `)\b`)
				f.qualified = regexp.MustCompile(`\b(` + strings.Join(ps, "|") + `)\.`)
			}
			fragments[name] = f
			return nil
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := headerRE.FindStringSubmatch(line); m != nil {
				if err := flush(); err != nil {
					return nil, nil, nil, err
				}
				kind, name, params, body = m[1], m[2], m[3], nil
				continue
			}
			if kind != "" {
				body = append(body, line)
			}
		}
		if err := flush(); err != nil {
			return nil, nil, nil, err
		}
	}
	return statements, slots, fragments, nil
}

// expand replaces every {{name args}} in text: a constant, or a fragment with its aliases
// bound to the arguments. A slot of the statement ({{filter}}) is left for its caller.
func expand(text string, fragments map[string]fragment, slots []string, depth int) (string, error) {
	if depth > 8 {
		return "", fmt.Errorf("fragments nested too deep")
	}
	var failed error
	out := placeholderRE.ReplaceAllStringFunc(text, func(ph string) string {
		m := placeholderRE.FindStringSubmatch(ph)
		name, args := m[1], strings.Fields(m[2])
		if v, ok := sqlConstants[name]; ok && len(args) == 0 {
			return v
		}
		if slices.Contains(slots, name) && len(args) == 0 {
			return ph
		}
		f, ok := fragments[name]
		if !ok {
			failed = fmt.Errorf("no fragment or constant %q", name)
			return ph
		}
		if len(args) != len(f.params) {
			failed = fmt.Errorf("%s takes %d alias(es), given %d", name, len(f.params), len(args))
			return ph
		}
		inner, err := expand(bind(f, args), fragments, nil, depth+1)
		if err != nil {
			failed = err
		}
		return inner
	})
	return out, failed
}

// bind writes a fragment's body with its aliases replaced: "r." by the argument and a dot,
// or, for an argument @p, by the parameter prefix "@p_"; an alias passed on to a fragment
// inside ({{queue_order r}}) by the argument itself.
func bind(f fragment, args []string) string {
	if len(f.params) == 0 {
		return f.body
	}
	arg := map[string]string{}
	for i, p := range f.params {
		arg[p] = args[i]
	}
	body := placeholderRE.ReplaceAllStringFunc(f.body, func(ph string) string {
		return f.passedOn.ReplaceAllStringFunc(ph, func(w string) string { return w[:1] + arg[w[1:]] })
	})
	return f.qualified.ReplaceAllStringFunc(body, func(w string) string {
		a := arg[strings.TrimSuffix(w, ".")]
		if strings.HasPrefix(a, "@") {
			return a + "_"
		}
		return a + "."
	})
}

// dynamic expands a statement built at run time (per width, per filter) the way the loaded
// ones are, so that it uses the same fragments; it panics on a name that does not exist.
func dynamic(name, text string) statement {
	sqlOnce.Do(loadSQL)
	text, err := expand(text, sqlFragments, nil, 0)
	if err != nil {
		panic(fmt.Sprintf("store: statement %s: %v", name, err))
	}
	return statement{name: name, sql: text}
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// fail is err from st, translated and named.
func (st statement) fail(err error) error {
	if err == nil {
		return nil
	}
	return &StatementError{Statement: st.name, Err: translate(err)}
}

func (st statement) exec(ctx context.Context, q querier, args ...any) (pgconn.CommandTag, error) {
	tag, err := q.Exec(ctx, st.sql, args...)
	return tag, st.fail(err)
}

func (st statement) query(ctx context.Context, q querier, args ...any) (pgx.Rows, error) {
	rows, err := q.Query(ctx, st.sql, args...)
	return rows, st.fail(err)
}

func (st statement) queryRow(ctx context.Context, q querier, args ...any) pgx.Row {
	return namedRow{q.QueryRow(ctx, st.sql, args...), st}
}

// queue adds st to a batch; scan reads its one row, and its error is named like any other.
func (st statement) queue(b *pgx.Batch, scan func(pgx.Row) error, args ...any) {
	b.Queue(st.sql, args...).QueryRow(func(row pgx.Row) error { return st.fail(scan(row)) })
}

type namedRow struct {
	pgx.Row
	st statement
}

func (r namedRow) Scan(dest ...any) error { return r.st.fail(r.Row.Scan(dest...)) }

// collect reads every row st answers, each with fn.
func collect[T any](ctx context.Context, q querier, st statement, fn pgx.RowToFunc[T], args ...any) ([]T, error) {
	rows, err := st.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, fn)
	return out, st.fail(err)
}

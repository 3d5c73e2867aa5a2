package apitest

import (
	"fmt"
	"net/url"
	"strings"
)

// Plan is a shape a test forces PostgreSQL's planner into: the settings every connection of a
// store opens with. A statement whose result, or whose success, depends on the plan the
// planner picks is right only if it is right under each of them — the planner's own choice
// follows the statistics, which autovacuum changes under a running service.
type Plan struct {
	Name     string
	Settings []string // name=value
}

// Plans are the join and scan methods a plan of the store's statements can be built of, each
// taken away in turn.
var Plans = []Plan{
	{Name: "as planned"},
	{Name: "no nested loops", Settings: []string{"enable_nestloop=off"}},
	{Name: "only nested loops", Settings: []string{"enable_hashjoin=off", "enable_mergejoin=off"}},
	{Name: "no index scans", Settings: []string{"enable_indexscan=off", "enable_indexonlyscan=off", "enable_bitmapscan=off"}},
	{Name: "no sequential scans", Settings: []string{"enable_seqscan=off"}},
}

// Session makes every connection of the store open with these run-time settings (name=value),
// sent in its startup packet: a test's statements then run under the plan they force.
func Session(settings ...string) Option {
	return func(o *options) { o.session = append(o.session, settings...) }
}

// SameDatabase opens the store on e's database instead of a fresh one: the rows e's test made,
// seen through another store (another plan, say).
func SameDatabase(e *Env) Option { return func(o *options) { o.database = e.database } }

// OnPlan is e's Mediator again, over the same database, with every connection under plan p.
// JIT compilation is off as well: the costs a disabled method is given would have every
// statement compiled, at a second apiece, without changing what it does.
func (e *Env) OnPlan(p Plan) *Env {
	e.T.Helper()
	return New(e.T, SameDatabase(e), Session(append([]string{"jit=off"}, p.Settings...)...))
}

// KeepStatistics turns autovacuum off for every table of the test's database: the planner
// then plans on the statistics the test gave it — none, until the test runs ANALYZE — and a
// test that depends on them does not see its plans change halfway through.
func (e *Env) KeepStatistics() {
	e.T.Helper()
	e.Exec(`DO $$ DECLARE t regclass; BEGIN
		FOR t IN SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' LOOP
			EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = off)', t);
		END LOOP; END $$`)
}

// withSession is a database URL whose connections open with the settings given.
func withSession(database string, settings []string) (string, error) {
	if len(settings) == 0 {
		return database, nil
	}
	u, err := url.Parse(database)
	if err != nil {
		return "", fmt.Errorf("the test database's URL: %w", err)
	}
	q := u.Query()
	for _, kv := range settings {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("setting %q is not name=value", kv)
		}
		q.Set(name, value)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

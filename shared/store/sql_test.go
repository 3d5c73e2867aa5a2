package store

import (
	"mediator/shared/wire"
	"strings"
	"testing"
	"testing/fstest"
)

// Every statement of sql/*.sql is fetched into a variable at init: one nobody uses is dead.
func TestEveryStatementIsUsed(t *testing.T) {
	for name := range sqlByName {
		if !sqlUsed[name] {
			t.Errorf("sql/*.sql: statement %s is used by no code", name)
		}
	}
}

func TestFragmentsExpand(t *testing.T) {
	files := fstest.MapFS{"sql/a.sql": {Data: []byte(`
-- fragment: order(r)
r.created_at, r.run_id

-- fragment: before(q, r)
-- q first
({{order q}}) < ({{order r}})

-- name: one
-- A reader's comment, dropped.
/* one */
SELECT 1 FROM runs x WHERE {{before x @head}} AND x.state = {{QUEUED}} ORDER BY {{order x}}

-- name: two(where)
/* two */
SELECT 1 FROM runs x WHERE {{where}} ORDER BY {{order x}}
`)}}
	statements, slots, _ := mustLoadSQL(files)
	want := `/* one */
SELECT 1 FROM runs x WHERE (x.created_at, x.run_id) < (@head_created_at, @head_run_id) AND x.state = 'QUEUED' ORDER BY x.created_at, x.run_id`
	if got := statements["one"]; got != want {
		t.Fatalf("expanded:\n%s\nwant:\n%s", got, want)
	}
	// A slot is left for the caller, and filled with text expanded like the rest.
	two := unfilled{name: "two", slots: slots["two"], sql: statements["two"]}
	if want := "/* two */\nSELECT 1 FROM runs x WHERE {{where}} ORDER BY x.created_at, x.run_id"; two.sql != want || len(two.slots) != 1 {
		t.Fatalf("expanded with its slots %v:\n%s\nwant:\n%s", two.slots, two.sql, want)
	}
	if got, want := two.fill(map[string]string{"where": "x.state = {{QUEUED}}"}).sql,
		"/* two */\nSELECT 1 FROM runs x WHERE x.state = 'QUEUED' ORDER BY x.created_at, x.run_id"; got != want {
		t.Fatalf("filled:\n%s\nwant:\n%s", got, want)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "slot where not filled") {
				t.Errorf("a slot left out: filled, or panicked without saying which: %v", r)
			}
		}()
		two.fill(map[string]string{})
	}()
	for name, text := range map[string]string{
		"unknown fragment": "-- name: s\n/* s */ SELECT {{nope}}",
		"wrong arity":      "-- fragment: f(a)\na.x\n-- name: s\n/* s */ SELECT {{f}}",
		"no tag":           "-- name: s\nSELECT 1",
		"twice":            "-- name: s\n/* s */ SELECT 1\n-- name: s\n/* s */ SELECT 2",
		"undeclared slot":  "-- name: s(a)\n/* s */ SELECT {{a}}, {{b}}",
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "sql/a.sql") && !strings.Contains(r.(string), "statement s") {
					t.Errorf("%s: loaded, or panicked without saying where: %v", name, r)
				}
			}()
			mustLoadSQL(fstest.MapFS{"sql/a.sql": {Data: []byte(text)}})
		}()
	}
}

// everyListFilter is every set of conditions a page of GET /v1/runs may have, each named by
// the conditions it has ("owner+state", "unfiltered" for an admin's page of every run).
func everyListFilter() map[string]ListRunsParams {
	seven, cursor := 7, &Cursor{CreatedAtMicros: 1, Name: "r"}
	out := map[string]ListRunsParams{}
	for mask := range 16 {
		p := ListRunsParams{Viewer: Viewer{Admin: mask&1 == 0, Owner: "client:a"}, Limit: 10}
		var name []string
		if !p.Viewer.Admin {
			name = append(name, "owner")
		}
		if mask&2 != 0 {
			p.State, name = wire.Queued, append(name, "state")
		}
		if mask&4 != 0 {
			p.Priority, name = &seven, append(name, "priority")
		}
		if mask&8 != 0 {
			p.After, name = cursor, append(name, "after")
		}
		if len(name) == 0 {
			name = []string{"unfiltered"}
		}
		out[strings.Join(name, "+")] = p
	}
	return out
}

// Every filter a page of GET /v1/runs may have writes a whole statement: each combination of
// the parameters, filled and expanded, leaves no placeholder behind.
func TestEveryListFilterExpands(t *testing.T) {
	t.Parallel()
	for name, p := range everyListFilter() {
		filter, args := listFilter(p)
		st := listRunsStmt.fill(map[string]string{"filter": filter})
		if strings.Contains(st.sql, "{{") || !strings.Contains(st.sql, "WHERE "+dynamic("filter", filter).sql+"\n") {
			t.Errorf("%s: filter %q (%d arguments) wrote:\n%s", name, filter, len(args), st.sql)
		}
	}
}

package store

import (
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
`)}}
	statements, _ := mustLoadSQL(files)
	want := `/* one */
SELECT 1 FROM runs x WHERE (x.created_at, x.run_id) < (@head_created_at, @head_run_id) AND x.state = 'QUEUED' ORDER BY x.created_at, x.run_id`
	if got := statements["one"]; got != want {
		t.Fatalf("expanded:\n%s\nwant:\n%s", got, want)
	}
	for name, text := range map[string]string{
		"unknown fragment": "-- name: s\n/* s */ SELECT {{nope}}",
		"wrong arity":      "-- fragment: f(a)\na.x\n-- name: s\n/* s */ SELECT {{f}}",
		"no tag":           "-- name: s\nSELECT 1",
		"twice":            "-- name: s\n/* s */ SELECT 1\n-- name: s\n/* s */ SELECT 2",
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

package store

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"mediator/shared/config"
)

var update = flag.Bool("update", false, "TestSQLGolden: rewrite testdata/sql/*.sql from the statements as the store sends them")

// goldenDir holds every statement as the store sends it, one file each (sql.go expands them):
// a change to a fragment shows, in review, in every statement that uses it.
const goldenDir = "testdata/sql"

// regenerate is how to rewrite the files, from the repository's root.
const regenerate = "go test ./shared/store -run TestSQLGolden -update"

// sentSQL is the text of every statement the store sends, by file name without .sql: each
// statement of sql/*.sql under its name; one with a slot as each of its fillings
// (list_runs.owner+state; the migrator's session settings as a migration without a deadline
// sets them); one built per width as widths 1 to 3 (submit_candidates.width2);
// and one a Store writes its settings into (bound) as a Store with the default settings
// sends it — never the text it is written from, which is never sent.
func sentSQL(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, text := range sqlByName {
		if len(sqlSlots[name]) == 0 {
			out[name] = text
		}
	}
	for name, p := range everyListFilter() {
		filter, _ := listFilter(p)
		out["list_runs."+name] = listRunsStmt.fill(map[string]string{"filter": filter}).sql
	}
	for width := 1; width <= 3; width++ {
		out[fmt.Sprintf("submit_candidates.width%d", width)] = candidatesSQL(width).sql
	}
	// A migration with no deadline: the longest statement timeout.
	out["migrator_session.longest"] = migratorSessionTimeouts(context.Background()).sql
	cfg, err := config.Load(func(name string) string { return map[string]string{"DATABASE_URL": "postgres://golden"}[name] })
	if err != nil {
		t.Fatal(err)
	}
	for file, st := range boundByFile(newBound(Settings{Starvation: cfg.Starvation})) {
		if file != st.name && !strings.HasPrefix(file, st.name+".") {
			t.Fatalf("bound statement %s filed as %s", st.name, file)
		}
		out[file] = st.sql
	}
	files := slices.Collect(maps.Keys(out))
	for name := range sqlSlots {
		if !slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, name+".") }) {
			t.Fatalf("statement %s has slots, and no filling of them is in %s", name, goldenDir)
		}
	}
	return out
}

// boundByFile is each of b's statements by its file: wake_start is bound twice.
func boundByFile(b bound) map[string]statement {
	return map[string]statement{
		"wake_start":             b.wakeStart,
		"wake_start.holding":     b.wakeStartHolding,
		"report_wake_start":      b.reportWakeStart,
		"waiting":                b.waiting,
		"wake_next_of_shape":     b.wakeNextOfShape,
		"wake_promote_protected": b.wakePromoteProtected,
	}
}

// The statements as sent are the files of testdata/sql, one for one: a change to sql/*.sql, a
// fragment, a constant or a statement built in Go shows in review as the text PostgreSQL gets.
func TestSQLGolden(t *testing.T) {
	t.Parallel()
	sent := sentSQL(t)
	names := slices.Sorted(maps.Keys(sent))
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := filepath.Glob(filepath.Join(goldenDir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) == 0 && !*update {
		t.Fatalf("%s has no statement: write them with `%s`", goldenDir, regenerate)
	}
	for _, path := range stale {
		if _, ok := sent[strings.TrimSuffix(filepath.Base(path), ".sql")]; ok {
			continue
		}
		if *update {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: no statement is sent as it; remove it with `%s`", path, regenerate)
	}
	for _, name := range names {
		path := filepath.Join(goldenDir, name+".sql")
		want := sent[name] + "\n"
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v; write it with `%s`", path, err, regenerate)
			continue
		}
		if string(got) != want {
			t.Errorf("%s is not the statement as sent: %s\n"+
				"If the change is meant, rewrite the files with `%s` and review `git diff %s`.",
				path, firstDifference(string(got), want), regenerate, filepath.Join("shared/store", goldenDir))
		}
	}
}

// firstDifference says where two texts part, with the line of each.
func firstDifference(file, sent string) string {
	a, b := strings.Split(file, "\n"), strings.Split(sent, "\n")
	for i := 0; ; i++ {
		switch {
		case i >= len(a) || i >= len(b):
			return fmt.Sprintf("the file has %d lines, the statement %d", len(a), len(b))
		case a[i] != b[i]:
			return fmt.Sprintf("first at line %d\n  file: %s\n  sent: %s", i+1, a[i], b[i])
		}
	}
}

// Every statement a Store writes a setting into has its file (boundByFile), and carries the
// setting it was given in place of the parameter: the golden files show one setting, this
// shows the statements follow it.
func TestBoundStatementsCarryTheirSettings(t *testing.T) {
	t.Parallel()
	b := newBound(Settings{Starvation: 1234500 * time.Millisecond})
	byFile := boundByFile(b)
	if n := reflect.TypeOf(b).NumField(); n != len(byFile) {
		t.Fatalf("bound has %d statements, boundByFile %d: give the new one its file", n, len(byFile))
	}
	for file, st := range byFile {
		if !strings.Contains(st.sql, "1234.5::float8") || strings.Contains(st.sql, starvationParam) {
			t.Errorf("%s does not carry the starvation setting in place of %s:\n%s", file, starvationParam, st.sql)
		}
	}
	if strings.Contains(b.wakeStart.sql, heldParam) || !strings.Contains(b.wakeStartHolding.sql, heldParam) {
		t.Errorf("wake_start reads the held nodes as a parameter only when the wake holds some")
	}
}

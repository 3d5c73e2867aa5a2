package startup_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mediator/localdev/testdb"
	"mediator/shared/startup"
	"mediator/shared/store"
)

// buildFunction compiles functions/<name> as Lambda would run it.
func buildFunction(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bin, "mediator/functions/"+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// startUp runs a built function with env and returns its exit error and stderr.
func startUp(t *testing.T, bin string, env ...string) (error, string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	return err, stderr.String()
}

// A bad setting stops the function at init with one line that names the variable.
func TestBadSettingStopsStartUp(t *testing.T) {
	t.Parallel()
	bin := buildFunction(t, "query")
	for _, value := range []string{"0", "sixty"} {
		err, stderr := startUp(t, bin, "DATABASE_URL=postgres://127.0.0.1:1/none", "LEASE_TTL_SECONDS="+value)
		if err == nil {
			t.Fatalf("LEASE_TTL_SECONDS=%s: the function started", value)
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "LEASE_TTL_SECONDS") {
			t.Fatalf("LEASE_TTL_SECONDS=%s: want one line naming the variable, got %q", value, stderr)
		}
	}
}

// A function refuses to serve a database whose schema is behind the build.
func TestSchemaBehindStopsStartUp(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.MigrateDown(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	err, stderr := startUp(t, buildFunction(t, "query"), "DATABASE_URL="+url)
	if err == nil {
		t.Fatal("the function started on an unmigrated database")
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "run the migrate function") {
		t.Fatalf("want one line saying to run the migrate function, got %q", stderr)
	}
}

// The migrate function opens inside its handler: a bad setting comes back as an error that
// names it, for the handler to answer, and the process goes on (Init would exit).
func TestMigratorOpenReturnsABadSetting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "LEASE_TTL_SECONDS": "sixty"}
	_, err := startup.Open(context.Background(), "migrate", func(name string) string { return env[name] })
	if err == nil || !strings.Contains(err.Error(), "LEASE_TTL_SECONDS") {
		t.Fatalf("opened with LEASE_TTL_SECONDS=sixty: %v", err)
	}
}

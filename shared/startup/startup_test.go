package startup_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	locals3 "mediator/localdev/s3"
	"mediator/localdev/testdb"
	"mediator/shared/config"
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

// A function given LOG_BUCKET and the AWS environment reaches the bucket through the default
// AWS configuration: AWS_ENDPOINT_URL_S3 points the client at a stand-in, addressed path-style
// even by a host name (virtual-hosted addressing would put the bucket in the host), and the
// URLs it signs are ones the endpoint takes. Without LOG_BUCKET there is no bucket.
func TestLogBucketFromTheEnvironment(t *testing.T) {
	ctx := context.Background()
	srv, err := locals3.Start(ctx, locals3.Options{Buckets: []string{"mediator-logs"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	endpoint := strings.Replace(srv.URL(), "127.0.0.1", "localhost", 1)
	for name, value := range map[string]string{
		"AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": srv.Region(),
		"AWS_ACCESS_KEY_ID": locals3.DefaultAccessKeyID, "AWS_SECRET_ACCESS_KEY": locals3.DefaultSecretAccessKey,
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
	} {
		t.Setenv(name, value)
	}
	if err := os.Unsetenv("AWS_ENDPOINT_URL"); err != nil { // set but empty would still override the S3 one
		t.Fatal(err)
	}
	load := func(kv map[string]string) config.Config {
		kv["DATABASE_URL"] = "postgres://127.0.0.1:1/none"
		cfg, err := config.Load(func(name string) string { return kv[name] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if b, err := startup.LogBucket(ctx, load(map[string]string{}), startup.NewAWS()); b != nil || err != nil {
		t.Fatalf("without LOG_BUCKET: %v, %v", b, err)
	}
	b, err := startup.LogBucket(ctx, load(map[string]string{"LOG_BUCKET": "mediator-logs"}), startup.NewAWS())
	if err != nil || b == nil {
		t.Fatalf("with LOG_BUCKET: %v, %v", b, err)
	}
	target := store.LogTarget{Owner: "client:alice", RunKey: "r", Attempt: 1, StepID: "s1", Try: 1, Epoch: 3}
	up, err := b.UploadURLs(ctx, target, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(up.Chunks[0].URL, endpoint+"/mediator-logs/") {
		t.Fatalf("not a path-style URL of %s: %s", endpoint, up.Chunks[0].URL)
	}
	req, err := http.NewRequest(http.MethodPut, up.Chunks[0].URL, strings.NewReader("from the environment\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT through the signed URL: %d", resp.StatusCode)
	}
	log, err := b.Read(ctx, store.StepLogFacts{RunID: "r", Owner: "client:alice", RunKey: "r", StepID: "s1", Attempt: 1,
		Current: true, State: "RUNNING", Tries: 1}, 0)
	if err != nil || len(log.Chunks) != 1 || log.Chunks[0].Bytes != int64(len("from the environment\n")) {
		t.Fatalf("read back: %+v, %v", log, err)
	}
}

// A function's clients share one load of the AWS configuration: what the environment said when
// the first client asked is what every later one gets, however the environment moves after.
func TestTheAWSConfigurationIsLoadedOnceForEveryClient(t *testing.T) {
	ctx := context.Background()
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFIRST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	a := startup.NewAWS()
	first, err := a.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDSECOND")
	second, err := a.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := second.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Region != "eu-west-1" || second.Region != "eu-west-1" || creds.AccessKeyID != "AKIDFIRST" {
		t.Fatalf("loaded again: regions %q and %q, key %q", first.Region, second.Region, creds.AccessKeyID)
	}
	if fresh, err := startup.NewAWS().Config(ctx); err != nil || fresh.Region != "us-east-1" {
		t.Fatalf("a new AWS reads the environment as it is now: %q, %v", fresh.Region, err)
	}
}

// BenchmarkClientsAtInit is what Init's three AWS clients (events, logs, push) cost a cold
// start, from one shared load and from a load each.
func BenchmarkClientsAtInit(b *testing.B) {
	ctx := context.Background()
	b.Setenv("AWS_REGION", "eu-west-1")
	b.Setenv("AWS_ACCESS_KEY_ID", "AKIDBENCH")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	cfg, err := config.Load(func(name string) string {
		return map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "EVENT_BUS_NAME": "mediator",
			"LOG_BUCKET": "mediator-logs", "IOT_DATA_ENDPOINT": "https://iot.example"}[name]
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		aws  func() [3]*startup.AWS
	}{
		{"shared", func() [3]*startup.AWS { a := startup.NewAWS(); return [3]*startup.AWS{a, a, a} }},
		{"a load each", func() [3]*startup.AWS { return [3]*startup.AWS{startup.NewAWS(), startup.NewAWS(), startup.NewAWS()} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				a := c.aws()
				if _, err := startup.Publisher(ctx, cfg, a[0], nil, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := startup.LogBucket(ctx, cfg, a[1]); err != nil {
					b.Fatal(err)
				}
				if _, err := startup.Hinter(ctx, cfg, a[2], nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package stress

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// killer is a pgx tracer that, when armed, terminates its own connection's backend with
// pg_terminate_backend as the nth statement containing match starts — a database connection
// lost in the middle of a request, at a chosen point.
type killer struct {
	url   string
	match string
	nth   int64
	armed atomic.Bool
	seen  atomic.Int64
	fired atomic.Bool
	mu    sync.Mutex
}

func (k *killer) arm(match string, nth int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.match, k.nth = match, nth
	k.seen.Store(0)
	k.fired.Store(false)
	k.armed.Store(true)
}

func (k *killer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	k.maybeKill(conn, data.SQL)
	return ctx
}

// A pipelined batch is sent whole: the connection dies as it goes, if any of its
// statements is the target.
func (k *killer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		if k.maybeKill(conn, q.SQL) {
			break
		}
	}
	return ctx
}

func (k *killer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (k *killer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (k *killer) maybeKill(conn *pgx.Conn, sql string) bool {
	k.mu.Lock()
	match, nth := k.match, k.nth
	k.mu.Unlock()
	if !k.armed.Load() || !strings.Contains(sql, match) || k.seen.Add(1) != nth {
		return false
	}
	k.armed.Store(false)
	admin, err := pgx.Connect(context.Background(), k.url)
	if err != nil {
		panic(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
		panic(err)
	}
	k.fired.Store(true)
	return true
}

func (k *killer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func faulty(t *testing.T) (*apitest.Env, *killer) {
	t.Helper()
	k := &killer{}
	env := apitest.New(t, apitest.PoolSize(4), apitest.Tracer(k))
	k.url = env.Config.Database.URL
	return env, k
}

// noPartialState: a connection lost mid-request leaves no RUNNING run without its leases, no
// lease without its run — nothing half-done.
func noPartialState(t *testing.T, env *apitest.Env) {
	t.Helper()
	env.CheckInvariants()
}

func mustFire(t *testing.T, k *killer) {
	t.Helper()
	if !k.fired.Load() {
		t.Fatal("the fault was never injected: the test no longer reaches the statement it targets")
	}
}

func submitBody(id, need string) map[string]any {
	return map[string]any{"run_id": id, "needs": []string{need}, "steps": []map[string]any{{"id": "s1"}}}
}

// The connection dies as the submit's insert starts: the client is told to retry (503),
// nothing is stored, and the retry is accepted.
func TestConnectionLostMidSubmit(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	env.Beat("A", "b1", false, "board")
	k.arm("/* submit: insert */", 1)
	resp := env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("r", "board"))
	mustFire(t, k)
	if resp.Status != 503 {
		t.Fatalf("submit on a lost connection: %s", resp)
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 0 {
		t.Fatalf("%d runs stored by a submit that was told to retry", n)
	}
	noPartialState(t, env)
	if resp := env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("r", "board")); resp.Status != 201 {
		t.Fatalf("the retry: %s", resp)
	}
}

// The connection dies after a queued submit committed, in the wake that follows: the answer
// does not depend on that connection (it is built from what was stored), so the client still
// hears 202 and the run is there.
func TestConnectionLostAfterSubmitCommitted(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	env.Beat("A", "b1", false, "board")
	env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("first", "board"))
	k.arm("/* wake: start */", 2) // the first is the submit's own read of the queue
	resp := env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("r", "board"))
	mustFire(t, k)
	if resp.Status != 202 || env.State("r") != wire.Queued {
		t.Fatalf("submit whose wake lost its connection: %s", resp)
	}
	noPartialState(t, env)
	if resp := env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("r", "board")); resp.Status != 200 {
		t.Fatalf("the resubmit: %s", resp)
	}
}

// The connection dies at the second of three promotions of one wake: the first stands, nothing
// is half-promoted, and the next reap places the runs left stranded.
func TestConnectionLostMidPromotion(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	for i := range 3 {
		r := apitest.NewRun(fmt.Sprintf("r%d", i), "board")
		r.WaitForCapacity = true
		env.Submit(r)
	}
	for i := range 3 {
		env.Heartbeat(fmt.Sprintf("n%d", i), "b1", false, "board") // the store alone: no wake
	}
	k.arm("/* wake: promote */", 2)
	if _, err := env.Store.WakeQueued(context.Background(), store.WakeParams{}); err == nil {
		t.Fatal("a wake that lost its connection reported success")
	}
	mustFire(t, k)
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING'`); n != 1 {
		t.Fatalf("%d runs running after the first promotion; the first stands and no other was half-done", n)
	}
	noPartialState(t, env)
	sum := env.Reap()
	if sum.Stranded != 2 || env.Count(`SELECT count(*) FROM runs WHERE state = 'RUNNING'`) != 3 {
		t.Fatalf("the next reap: %+v", sum)
	}
	noPartialState(t, env)
}

// The connection dies as a report commits: nothing of it is applied, and the node's retry is.
func TestConnectionLostMidReport(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	env.Beat("A", "b1", false, "board")
	env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("r", "board"))
	epoch := env.Epoch("A")
	env.Report("A", "b1", epoch, "r", "s1", "started")
	k.arm("commit", 1)
	resp := env.Report("A", "b1", epoch, "r", "s1", "succeeded")
	mustFire(t, k)
	if resp.Status != 503 {
		t.Fatalf("a report whose commit was lost: %s", resp)
	}
	if env.State("r") != wire.Running || env.Count(`SELECT count(*) FROM steps WHERE state = 'RUNNING'`) != 1 {
		t.Fatal("part of a report that never committed was applied")
	}
	noPartialState(t, env)
	if resp := env.Report("A", "b1", epoch, "r", "s1", "succeeded"); resp.Status != 200 || env.State("r") != wire.Succeeded {
		t.Fatalf("the retry: %s", resp)
	}
}

// The reaper's connection dies at the fifth of twenty expired leases: what it did stands, the
// lease it was on is untouched, and the next reap finishes the job.
func TestReaperKilledHalfway(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	for i := range 20 {
		env.Heartbeat(fmt.Sprintf("n%02d", i), "b1", false, "board")
		env.Submit(apitest.NewRun(fmt.Sprintf("r%02d", i), "board"))
	}
	env.Exec(`UPDATE leases SET expires_at = now() - interval '1 second'`)
	k.arm("/* lose a lease */", 5)
	if _, err := env.Store.Reap(context.Background(), store.ReapParams{}); err == nil {
		t.Fatal("a reaper that lost its connection reported success")
	}
	mustFire(t, k)
	if n := env.Count(`SELECT count(*) FROM leases`); n != 16 {
		t.Fatalf("%d leases left after 4 of 20 were reaped", n)
	}
	noPartialState(t, env)
	if sum := env.Reap(); sum.Expired != 16 {
		t.Fatalf("the next reap: %+v", sum)
	}
	if n := env.Count(`SELECT count(*) FROM runs WHERE state = 'FAILED' AND reason = 'lease_expired'`); n != 20 {
		t.Fatalf("%d runs failed lease_expired", n)
	}
	noPartialState(t, env)
}

// The wake after a result's commit fails: the node's answer is unchanged (the result was
// applied), the queued run is left next to the freed node, and the next reap finds it and
// counts it as stranded.
func TestWakeFailsAfterCommit(t *testing.T) {
	t.Parallel()
	env, k := faulty(t)
	env.Beat("A", "b1", false, "board")
	env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("a", "board"))
	env.Do(apitest.Client("c"), "POST", "/v1/runs", submitBody("b", "board"))
	epoch := env.Epoch("A")
	env.Report("A", "b1", epoch, "a", "s1", "started")
	k.arm("/* wake: promote */", 1) // the wake's first statement: it starts from the report's read
	resp := env.Report("A", "b1", epoch, "a", "s1", "succeeded")
	mustFire(t, k)
	if resp.Status != 200 || env.State("a") != wire.Succeeded {
		t.Fatalf("a result whose wake failed: %s", resp)
	}
	if env.State("b") != wire.Queued {
		t.Fatal("setup: b was placed anyway")
	}
	if sum := env.Reap(); sum.Stranded != 1 || env.State("b") != wire.Running {
		t.Fatalf("the next reap: %+v, b %s", sum, env.State("b"))
	}
	noPartialState(t, env)
}

package httpapi_test

// Every wait is bounded. A row held by another session — an operator's psql, a stuck
// transaction — makes the routes that need it answer 503 with Retry-After once the lock
// timeout passes (at COMMIT too, where a deferred constraint takes its lock), leaves the
// database as it was, and the same call succeeds once the row is free. Routes that do not need
// the row answer normally.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/config"
)

// shortTimeouts keep the test quick: a 200 ms lock timeout under a 1 s statement timeout.
func shortTimeouts(c *config.Config) {
	c.Database.StatementTimeout, c.Database.LockTimeout = time.Second, 200*time.Millisecond
}

// lockCall is one request and what it must get while the row is held.
type lockCall struct {
	name         string
	who          auth.Principal
	method, path string
	body         any
	held         int // the status while the row is held
	free         int // the status of the same call afterwards (for a refused call)
}

// holdRow holds rows from a session of its own, as psql would (BEGIN; SELECT ... FOR UPDATE),
// until release is called.
func holdRow(t *testing.T, env *apitest.Env, sql string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.Config.Database.URL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(ctx, sql); err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("hold %q: %v (%d rows)", sql, err, tag.RowsAffected())
	}
	return func() {
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	}
}

// doBounded sends a call that must come back on its own; a call still waiting after a minute
// waits for the lock without a bound, and fails the test instead of hanging it.
func doBounded(t *testing.T, env *apitest.Env, c lockCall) apitest.Response {
	t.Helper()
	done := make(chan apitest.Response, 1)
	go func() { done <- env.Do(c.who, c.method, c.path, c.body) }()
	select {
	case resp := <-done:
		return resp
	case <-time.After(time.Minute):
		t.Fatalf("%s: still waiting for the held row after a minute: no bound on the wait", c.name)
		return apitest.Response{}
	}
}

// lockFixture: node A free (label a); node C leased by run "r" (label c) whose step s1 has
// started; node B free (label b). Adverts and the lease are half a TTL old, so the next
// heartbeat must write them.
func lockFixture(t *testing.T) *apitest.Env {
	env := apitest.New(t, apitest.Configure(shortTimeouts))
	env.Beat("A", "b1", false, "a")
	env.Beat("B", "b1", false, "b")
	env.Beat("C", "b1", false, "c")
	if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("r", "c", "s1", "s2")); resp.Status != 201 {
		t.Fatalf("r: %s", resp)
	}
	if resp := env.Report("C", "b1", env.Epoch("C"), "r", "s1", "started"); resp.Status != 200 {
		t.Fatalf("started: %s", resp)
	}
	env.Exec(`UPDATE nodes SET advert_expires_at = now() + interval '30 seconds'`)
	env.Exec(`UPDATE leases SET expires_at = now() + interval '30 seconds'`)
	return env
}

func beat(node string) lockCall {
	return lockCall{name: "heartbeat " + node, who: apitest.Node(node), method: "PUT", path: "/v1/nodes/" + node,
		body: map[string]any{"boot_id": "b1", "labels": []string{map[string]string{"A": "a", "B": "b", "C": "c"}[node]}}}
}

func report(env *apitest.Env, step, status string) lockCall {
	return lockCall{name: status + " " + step, who: apitest.Node("C"), method: "POST", path: "/v1/runs/r/steps/" + step + "/result",
		body: map[string]any{"node_id": "C", "boot_id": "b1", "epoch": env.Epoch("C"), "status": status, "exit_code": 0}}
}

// with sets what a call must get while the row is held, and afterwards.
func with(c lockCall, held, free int) lockCall {
	c.held, c.free = held, free
	return c
}

func TestHeldRowsAnswer503AndNothingElseWaits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		hold  string
		calls func(env *apitest.Env) []lockCall
	}{
		{"node A", `SELECT 1 FROM nodes WHERE node_id = 'A' FOR UPDATE`, func(env *apitest.Env) []lockCall {
			return []lockCall{
				with(beat("A"), 503, 200),
				// Only a restart changing A's boot (or a removal) holds A's row so: a submit does
				// not wait for it, it queues the run, and the restart's wake places it.
				{held: 202, name: "submit onto A", who: alice, method: "POST", path: "/v1/runs", body: oneNodeRun("onto-a", "a")},
				{held: 503, free: 200, name: "remove A", who: apitest.Admin, method: "DELETE", path: "/v1/nodes/A"},
				with(beat("B"), 200, 0),
				{held: 201, name: "submit onto B", who: alice, method: "POST", path: "/v1/runs", body: oneNodeRun("onto-b", "b")},
				{held: 200, name: "list nodes", who: apitest.Admin, method: "GET", path: "/v1/nodes"},
				{held: 200, name: "healthz", method: "GET", path: "/healthz"},
			}
		}},
		{"run r", `SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE`, func(env *apitest.Env) []lockCall {
			return []lockCall{
				with(report(env, "s1", "succeeded"), 503, 200),
				{held: 503, free: 200, name: "cancel r", who: alice, method: "POST", path: "/v1/runs/r/cancel"},
				{held: 200, name: "get r", who: alice, method: "GET", path: "/v1/runs/r"},
				{held: 200, name: "list runs", who: alice, method: "GET", path: "/v1/runs"},
				with(beat("C"), 200, 0),
				{held: 201, name: "submit onto A", who: alice, method: "POST", path: "/v1/runs", body: oneNodeRun("onto-a", "a")},
				{held: 200, name: "queue", who: alice, method: "GET", path: "/v1/queue"},
			}
		}},
		{"C's lease", `SELECT 1 FROM leases WHERE node_id = 'C' FOR UPDATE`, func(env *apitest.Env) []lockCall {
			return []lockCall{
				with(beat("C"), 503, 200),
				// s2 is left: the lease is only read, not released.
				with(report(env, "s1", "failed"), 200, 0),
				// The forced cancel releases the lease.
				{held: 503, free: 200, name: "force cancel r", who: apitest.Admin, method: "POST", path: "/v1/runs/r/cancel", body: map[string]any{"force": true}},
				{held: 200, name: "list leases", who: apitest.Admin, method: "GET", path: "/v1/leases"},
				with(beat("A"), 200, 0),
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := lockFixture(t)
			calls := tc.calls(env)
			release := holdRow(t, env, tc.hold)
			var refused []lockCall
			for _, c := range calls {
				before := snapshot(t, env)
				resp := doBounded(t, env, c)
				if resp.Status != c.held {
					t.Errorf("%s while %s is held: %s; want %d", c.name, tc.name, resp, c.held)
					continue
				}
				if c.held != 503 {
					continue
				}
				checkProblem(t, resp, problemID(t, resp), "unavailable", "")
				if resp.Headers["retry-after"] != "1" {
					t.Errorf("%s: 503 without Retry-After: 1 (headers %v)", c.name, resp.Headers)
				}
				if after := snapshot(t, env); !equalMaps(before, after) {
					t.Errorf("%s: refused with 503, yet the database changed:\n%v\n%v", c.name, before, after)
				}
				refused = append(refused, c)
			}
			release()
			env.Wake() // as the writer that held the row does after its commit
			for _, c := range refused {
				if resp := env.Do(c.who, c.method, c.path, c.body); resp.Status != c.free {
					t.Errorf("%s once the row is free: %s; want %d", c.name, resp, c.free)
				}
			}
			env.CheckInvariants()
		})
	}
}

// Every connection of the pool is taken (here: the only one, held by the test): a request
// waits for one no longer than its deadline, then answers 503, and is served once one is free.
func TestPoolExhaustedAnswers503(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(1), apitest.Configure(shortTimeouts))
	conn, err := env.Store.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	call := lockCall{name: "get a run", who: alice, method: "GET", path: "/v1/runs/nope"}
	resp := doBounded(t, env, call)
	if resp.Status != 503 || resp.Headers["retry-after"] != "1" {
		conn.Release()
		t.Fatalf("with the pool exhausted: %s %v; want 503 with Retry-After", resp, resp.Headers)
	}
	checkProblem(t, resp, problemID(t, resp), "unavailable", "")
	conn.Release()
	if resp := env.Do(call.who, call.method, call.path, nil); resp.Status != 404 {
		t.Fatalf("with a connection free: %s", resp)
	}
}

// problemID is the request id a problem answer carries (checkProblem compares it with itself:
// these calls are not built by the test with an id of their own).
func problemID(t *testing.T, resp apitest.Response) string {
	t.Helper()
	var p problemBody
	resp.Decode(t, &p)
	return p.RequestID
}

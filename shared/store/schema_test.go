package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"mediator/localdev/testdb"
	"mediator/migrations"
	"mediator/shared/store"
)

// fixture: node n1 leased by RUNNING run r1 (role main, step s1); node n2 idle; QUEUED run q1.
const fixture = `
INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at) VALUES
    ('n1', '{board=rpi4}', 'b1', now() + interval '1 minute'),
    ('n2', '{board=rpi4}', 'b1', now() + interval '1 minute');
INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, started_at) VALUES
    ('r1', 'r1', 'client:t', 'RUNNING', '\x00', '[["board=rpi4"]]', 1, 1, now());
INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts) VALUES
    ('q1', 'q1', 'client:t', 'QUEUED', '\x00', '[["board=rpi4"]]', 1, 1);
INSERT INTO run_roles (run_id, role, ordinal, needs, node_id) VALUES
    ('r1', 'main', 0, '{board=rpi4}', 'n1'), ('q1', 'main', 0, '{board=rpi4}', '');
INSERT INTO steps (run_id, step_id, role, ordinal) VALUES ('r1', 's1', 'main', 0), ('q1', 's1', 'main', 0);
INSERT INTO leases (node_id, run_id, role, boot_id, expires_at) VALUES ('n1', 'r1', 'main', 'b1', now() + interval '1 minute');
INSERT INTO run_events (run_id, attempt, kind, from_state, to_state) VALUES ('r1', 1, 'submitted', NULL, 'RUNNING');
`

// withFixture connects to a database of the test's own holding the fixture.
func withFixture(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, fixture); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return conn
}

// TestConstraintsHaveNames breaks every invariant of DESIGN.md that the schema holds, and checks
// that PostgreSQL refuses it under the constraint's name — at the statement, or at COMMIT
// for the deferred ones — and that the store translates it.
func TestConstraintsHaveNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql, constraint string
		want                  error
	}{
		// I1: one lease per node.
		{"I1 second lease on a node", `INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
			VALUES ('n1', 'q1', 'main', 'b1', now())`, "leases_pkey", store.ErrNodeChanged},
		// I2: only a RUNNING run holds leases — refused at COMMIT.
		{"I2 terminal run still leased", `UPDATE steps SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'r1';
			UPDATE runs SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'r1'`, "leases_held_by_running_run", store.ErrInvariant},
		{"I2 lease row not for a RUNNING run", `INSERT INTO leases (node_id, run_id, run_state, role, boot_id, expires_at)
			VALUES ('n2', 'r1', 'QUEUED', 'main', 'b1', now())`, "leases_run_state_running", store.ErrInvariant},
		// I3: a QUEUED run holds nothing — refused at COMMIT.
		{"I3 queued run names a node", `UPDATE run_roles SET node_id = 'n2' WHERE run_id = 'q1'`, "runs_queued_holds_nothing", store.ErrInvariant},
		// I4: identifiers are unique.
		{"I4 a key twice", `INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts)
			VALUES ('q1', 'other', 'client:u', 'QUEUED', '\x00', '[]', 1, 1)`, "runs_pkey", store.ErrInvariant},
		{"I4 an owner's run_id twice", `INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts)
			VALUES ('q1.other', 'q1', 'client:t', 'QUEUED', '\x00', '[]', 1, 1)`, "runs_owner_name_key", store.ErrInvariant},
		{"I4 step id twice", `INSERT INTO steps (run_id, step_id, role, ordinal) VALUES ('q1', 's1', 'main', 1)`, "steps_pkey", store.ErrInvariant},
		{"I4 role twice", `INSERT INTO run_roles (run_id, role, ordinal, needs) VALUES ('q1', 'main', 1, '{}')`, "run_roles_pkey", store.ErrInvariant},
		// I5: finished_at exactly when terminal.
		{"I5 finished but queued", `UPDATE runs SET finished_at = now() WHERE run_id = 'q1'`, "runs_finished_at_iff_terminal", store.ErrInvariant},
		{"I5 failed without finished_at", `UPDATE steps SET state = 'CANCELLED', finished_at = now() WHERE run_id = 'q1';
			UPDATE runs SET state = 'FAILED', reason = 'timeout' WHERE run_id = 'q1'`, "runs_finished_at_iff_terminal", store.ErrInvariant},
		// Each role of a run on its own node.
		{"two roles on one node", `INSERT INTO run_roles (run_id, role, ordinal, needs, node_id) VALUES ('r1', 'aux', 1, '{}', 'n1')`,
			"run_roles_distinct_nodes", store.ErrNodeChanged},
		// A restart must release the lease held under the old boot — refused at COMMIT.
		{"lease outlives its boot", `UPDATE nodes SET boot_id = 'b2' WHERE node_id = 'n1'`, "leases_held_under_current_boot", store.ErrNodeChanged},
		{"lease on a node the role was not given", `UPDATE run_roles SET node_id = 'n2' WHERE run_id = 'r1'`, "leases_match_role_assignment", store.ErrInvariant},
		{"settled with a step left", `UPDATE runs SET state = 'CANCELLED', reason = 'cancelled', finished_at = now() WHERE run_id = 'q1'`,
			"runs_settled_with_steps_final", store.ErrInvariant},
		{"promoted twice in one attempt", `INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
			VALUES ('r1', 1, 'promoted', 'QUEUED', 'RUNNING')`, "run_events_running_once_per_attempt", store.ErrInvariant},
		{"history rewritten", `UPDATE run_events SET kind = 'x'`, "run_events_append_only", store.ErrInvariant},
		{"history deleted", `DELETE FROM run_events`, "run_events_append_only", store.ErrInvariant},
		{"run_id pattern", `INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts)
			VALUES ('bad id', 'bad id', 'client:t', 'QUEUED', '\x00', '[]', 1, 1)`, "mediator_id_format", store.ErrInvariant},
		{"attempt past max", `UPDATE runs SET attempt = 2 WHERE run_id = 'q1'`, "runs_attempt_within_max", store.ErrInvariant},
		{"unknown state", `UPDATE runs SET state = 'READY' WHERE run_id = 'q1'`, "runs_state_valid", store.ErrInvariant},
		{"reason on a live run", `UPDATE runs SET reason = 'timeout' WHERE run_id = 'q1'`, "runs_reason_iff_failed_or_cancelled", store.ErrInvariant},
		{"tries past retries", `UPDATE steps SET tries = 2 WHERE run_id = 'q1'`, "steps_tries_within_retries", store.ErrInvariant},
		{"running without started_at", `UPDATE runs SET started_at = NULL WHERE run_id = 'r1'`, "runs_running_has_started_at", store.ErrInvariant},
		{"a second pulse", `INSERT INTO heartbeat_pulse (only_row) VALUES (false)`, "heartbeat_pulse_one_row", store.ErrInvariant},
		{"half a silence", `UPDATE heartbeat_pulse SET quiet_from = now()`, "heartbeat_pulse_quiet_whole", store.ErrInvariant},
		// A step's log summary, as a terminal report stores it.
		{"a log of negative size", stepLog(`'r1', 's1', 1, 'SUCCEEDED', -1, repeat('a', 64), true`), "step_logs_bytes_not_negative", store.ErrInvariant},
		{"a log digest in capitals", stepLog(`'r1', 's1', 1, 'SUCCEEDED', 0, repeat('A', 64), true`), "step_logs_sha256_hex", store.ErrInvariant},
		{"a log digest cut short", stepLog(`'r1', 's1', 1, 'SUCCEEDED', 0, repeat('a', 63), true`), "step_logs_sha256_hex", store.ErrInvariant},
		{"a log of a step still running", stepLog(`'r1', 's1', 1, 'RUNNING', 0, repeat('a', 64), true`), "step_logs_state_final", store.ErrInvariant},
		{"a log of attempt 0", stepLog(`'r1', 's1', 0, 'FAILED', 0, repeat('a', 64), true`), "step_logs_attempt_positive", store.ErrInvariant},
		{"a log of no step", stepLog(`'r1', 'nope', 1, 'FAILED', 0, repeat('a', 64), true`), "step_logs_step_fkey", store.ErrInvariant},
		{"a log twice", stepLog(`'r1', 's1', 1, 'FAILED', 0, repeat('a', 64), true), ('r1', 's1', 1, 'FAILED', 1, repeat('b', 64), false`),
			"step_logs_pkey", store.ErrInvariant},
		// A node's health (migration 0015).
		{"an unknown health", `UPDATE nodes SET health = 'poorly' WHERE node_id = 'n1'`, "nodes_health_state", store.ErrInvariant},
		{"a negative count", `UPDATE nodes SET infra_failures = -1 WHERE node_id = 'n1'`, "nodes_infra_failures_not_negative", store.ErrInvariant},
		{"quarantined by nobody", `UPDATE nodes SET health = 'quarantined' WHERE node_id = 'n1'`,
			"nodes_quarantined_by_iff_quarantined", store.ErrInvariant},
		{"a healthy node quarantined by someone", `UPDATE nodes SET quarantined_by = 'system' WHERE node_id = 'n1'`,
			"nodes_quarantined_by_iff_quarantined", store.ErrInvariant},
		{"quarantined by a stranger", `UPDATE nodes SET health = 'quarantined', quarantined_by = 'client:x' WHERE node_id = 'n1'`,
			"nodes_quarantined_by_format", store.ErrInvariant},
		{"a reason past its bound", `UPDATE nodes SET health_reason = repeat('x', 1025) WHERE node_id = 'n1'`,
			"nodes_health_reason_bounded", store.ErrInvariant},
		{"a health change to itself", `INSERT INTO node_history (node_id, kind, from_state, to_state, by)
			VALUES ('n1', 'health', 'healthy', 'healthy', 'system')`, "node_history_health_states", store.ErrInvariant},
		{"a lease line of no run", `INSERT INTO node_history (node_id, kind, to_state) VALUES ('n1', 'lease', 'leased')`,
			"node_history_lease_states", store.ErrInvariant},
		{"an unknown history line", `INSERT INTO node_history (node_id, kind, to_state) VALUES ('n1', 'mood', 'x')`,
			"node_history_kind", store.ErrInvariant},
		{"an unknown run kind", `UPDATE runs SET kind = 'lunch' WHERE run_id = 'q1'`, "runs_kind_known", store.ErrInvariant},
		{"a check every 0 seconds", `INSERT INTO health_checks (name, needs, steps, every_seconds, updated_by)
			VALUES ('c', '{}', '[]', 0, 'admin:x')`, "health_checks_every_positive", store.ErrInvariant},
		{"a check's steps not a list", `INSERT INTO health_checks (name, needs, steps, updated_by)
			VALUES ('c', '{}', '{}', 'admin:x')`, "health_checks_steps_array", store.ErrInvariant},
		// Health checks placed (migration 0016).
		{"a check run of no check", `UPDATE runs SET kind = 'health_check' WHERE run_id = 'q1'`,
			"runs_health_check_names_check_and_node", store.ErrInvariant},
		{"a client's run naming a check", `UPDATE runs SET check_name = 'usb', check_node = 'n1' WHERE run_id = 'q1'`,
			"runs_health_check_names_check_and_node", store.ErrInvariant},
		{"a node reserved for no run", `UPDATE nodes SET check_run_id = 'nope' WHERE node_id = 'n1'`,
			"nodes_check_run_fkey", store.ErrInvariant},
		// Holds (migration 0017).
		{"a run with a hold's length", `UPDATE runs SET hold_seconds = 60 WHERE run_id = 'q1'`,
			"runs_hold_iff_hold_seconds", store.ErrInvariant},
		{"a run with steps made a hold", `UPDATE runs SET kind = 'hold', hold_seconds = 60 WHERE run_id = 'q1'`,
			"steps_of_run_kind", store.ErrInvariant},
		{"a step of a hold", `INSERT INTO steps (run_id, run_kind, step_id, role, ordinal) VALUES ('q1', 'hold', 's9', 'main', 9)`,
			"steps_not_of_a_hold", store.ErrInvariant},
		{"a run's end that is a hold's", `UPDATE runs SET hold_ends_at = now() WHERE run_id = 'r1'`,
			"runs_hold_ends_only_for_holds", store.ErrInvariant},
		// Hold notices (migration 0018).
		{"a run warned of a hold's end", `UPDATE runs SET hold_warned_for = now() WHERE run_id = 'r1'`,
			"runs_hold_warned_only_for_holds", store.ErrInvariant},
		// Debug holds (migration 0019).
		{"a debug hold of nothing", `UPDATE runs SET debug_hold = 'nope' WHERE run_id = 'q1'`, "runs_debug_hold_fkey", store.ErrInvariant},
		{"a run that is the debug hold of another", `UPDATE runs SET debug_of = 'r1' WHERE run_id = 'q1'`,
			"runs_debug_of_is_a_hold", store.ErrInvariant},
		{"keeping for no time", `UPDATE runs SET keep_on_failure_seconds = 0 WHERE run_id = 'q1'`,
			"runs_keep_on_failure_positive", store.ErrInvariant},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, conn := context.Background(), withFixture(t)
			// The breaking write and its COMMIT: whichever refuses it, the name must be right.
			_, err := conn.Exec(ctx, "BEGIN; "+tc.sql+"; COMMIT")
			if err == nil {
				t.Fatalf("PostgreSQL accepted it; want %s", tc.constraint)
			}
			var ce *store.ConstraintError
			if !errors.As(store.Translate(err), &ce) {
				t.Fatalf("got %v; want a constraint error naming %s", err, tc.constraint)
			}
			if ce.Constraint != tc.constraint {
				t.Fatalf("refused by %s; want %s (%v)", ce.Constraint, tc.constraint, err)
			}
			if !errors.Is(ce, tc.want) {
				t.Fatalf("translated to %v; want %v", ce, tc.want)
			}
		})
	}
}

// stepLog inserts step_logs rows of the values given.
func stepLog(values string) string {
	return `INSERT INTO step_logs (run_id, step_id, attempt, state, bytes, sha256, uploaded) VALUES (` + values + `)`
}

// TestMigrationsRoundTrip: up, down, up on an empty database.
func TestMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := store.Connect(ctx, store.PoolParams{URL: testdb.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The test database is a clone of the migrated template: down first empties it.
	if v, err := store.MigrateDown(ctx, pool); err != nil || v != 0 {
		t.Fatalf("down: version %d, %v", v, err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("after down: %d tables left, %v", tables, err)
	}
	for i := range 2 {
		v, err := store.Migrate(ctx, pool, store.AppRole{Name: testdb.Roles().App})
		if err != nil || v != migrations.Latest() {
			t.Fatalf("up #%d: version %d, %v; want %d", i+1, v, err, migrations.Latest())
		}
	}
	if _, err := store.MigrateDown(ctx, pool); err != nil {
		t.Fatalf("second down: %v", err)
	}
	if v, err := store.Migrate(ctx, pool, store.AppRole{Name: testdb.Roles().App}); err != nil || v != migrations.Latest() {
		t.Fatalf("second up: version %d, %v", v, err)
	}
}

// TestI2RefusedAtCommit: the terminal state itself is written; it is the COMMIT, with a lease
// still pointing at the run, that PostgreSQL refuses.
func TestI2RefusedAtCommit(t *testing.T) {
	t.Parallel()
	ctx, conn := context.Background(), withFixture(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE steps SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'r1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = 'r1'`); err != nil {
		t.Fatalf("the UPDATE itself was refused (%v); I2 must be checked at COMMIT", err)
	}
	err = tx.Commit(ctx)
	var ce *store.ConstraintError
	if !errors.As(store.Translate(err), &ce) || ce.Constraint != "leases_held_by_running_run" {
		t.Fatalf("COMMIT: %v; want leases_held_by_running_run", err)
	}
	var state string
	if err := conn.QueryRow(ctx, `SELECT state FROM runs WHERE run_id = 'r1'`).Scan(&state); err != nil || state != "RUNNING" {
		t.Fatalf("after the refused commit the run is %q (%v); want RUNNING", state, err)
	}
}

// Through RDS Proxy nothing is sent at startup and no statement is named, and the store still
// works; directly, the timeouts arrive in the startup packet.
func TestConnectionModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	for _, viaProxy := range []bool{false, true} {
		pool, err := store.Connect(ctx, store.PoolParams{URL: url, ViaProxy: viaProxy, StatementTimeout: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var timeout, jit string
		var named int
		st := store.New(pool, store.Settings{LeaseTTL: time.Minute, MaxRunWidth: 16}, nil)
		if _, err := st.ListNodes(ctx, store.ListNodesParams{}); err != nil {
			t.Fatalf("viaProxy=%v: %v", viaProxy, err)
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('jit'), (SELECT count(*) FROM pg_prepared_statements)`).Scan(&timeout, &jit, &named); err != nil {
			t.Fatal(err)
		}
		c.Release()
		pool.Close()
		switch {
		case viaProxy && (timeout != "0" || named != 0):
			t.Errorf("through the proxy: statement_timeout %s, %d named statements", timeout, named)
		case !viaProxy && (timeout != "4s" || jit != "off"):
			t.Errorf("direct: statement_timeout %s, jit %s", timeout, jit)
		}
	}
}

// free_nodes follows the leases and the nodes with no help from the store: a lease taken
// removes its node, a lease released puts it back, a new node starts free, a removed one
// leaves. Each step runs in a transaction of its own that is rolled back, from the fixture.
func TestFreeNodesFollowLeasesAndNodes(t *testing.T) {
	t.Parallel()
	ctx, conn := context.Background(), withFixture(t)
	free := func(q pgx.Tx) string {
		t.Helper()
		var ids string
		if err := q.QueryRow(ctx, `SELECT coalesce(string_agg(node_id, ',' ORDER BY node_id), '') FROM free_nodes`).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	cases := []struct{ name, sql, want string }{
		{"as the fixture leaves it", `SELECT 1`, "n2"},
		{"a lease released", `DELETE FROM leases WHERE node_id = 'n1'`, "n1,n2"},
		{"a lease taken", `INSERT INTO leases (node_id, run_id, role, boot_id, expires_at) VALUES ('n2', 'q1', 'main', 'b1', now())`, ""},
		{"a node registered", `INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at) VALUES ('n3', '{}', 'b1', now())`, "n2,n3"},
		{"a node removed", `DELETE FROM nodes WHERE node_id = 'n2'`, ""},
		{"a leased node removed with its lease", `DELETE FROM leases WHERE node_id = 'n1'; DELETE FROM nodes WHERE node_id = 'n1'`, "n2"},
	}
	for _, tc := range cases {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, tc.sql); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := free(tx); got != tc.want {
			t.Errorf("%s: free_nodes %q, want %q", tc.name, got, tc.want)
		}
		_ = tx.Rollback(ctx)
	}
}

// A deferred constraint takes its row lock at COMMIT, where statement_timeout does not reach:
// there lock_timeout, sent with every connection, is what bounds the wait for a row another
// session holds (SQLSTATE 55P03, not 57014). The store takes it for a transient refusal.
func TestLockTimeoutBoundsTheWaitAtCommit(t *testing.T) {
	t.Parallel()
	ctx, holder := context.Background(), withFixture(t)
	pool, err := store.Connect(ctx, store.PoolParams{
		URL: holder.Config().ConnString(), StatementTimeout: 10 * time.Second, LockTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// n2 held as an operator's psql would hold it.
	if _, err := holder.Exec(ctx, `BEGIN; SELECT 1 FROM nodes WHERE node_id = 'n2' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	defer holder.Exec(ctx, `ROLLBACK`)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// A lease on n2: its foreign key to the node (leases_held_under_current_boot) is deferred,
	// so the statement itself takes no lock and succeeds.
	if _, err := tx.Exec(ctx, `INSERT INTO run_roles (run_id, role, ordinal, needs, node_id) VALUES ('r1', 'aux', 1, '{}', 'n2');
		INSERT INTO leases (node_id, run_id, role, boot_id, expires_at) VALUES ('n2', 'r1', 'aux', 'b1', now() + interval '1 minute')`); err != nil {
		t.Fatalf("the insert itself waited: %v", err)
	}
	// Bounded here too, so that without lock_timeout the test fails instead of hanging.
	commitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = tx.Commit(commitCtx)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "55P03" {
		t.Fatalf("COMMIT while the node is held: %v; want lock_timeout's lock_not_available (55P03)", err)
	}
	if !errors.Is(store.Translate(err), store.ErrUnavailable) {
		t.Fatalf("the store took %v for something other than unavailable", store.Translate(err))
	}
}

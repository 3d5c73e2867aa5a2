package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/localdev/testdb"
	"mediator/shared/match"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Where a rule has a Go twin, these tests hold the two together on a real server: the rule as
// the statements run it (through the same fragments) against the Go function, over cases
// chosen to tell them apart.

func rulesConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Run ids that sort differently under different rules: case, punctuation, digits, length.
var trickyIDs = []string{"a", "A", "b", "B", "a-b", "a.b", "a:b", "a_b", "ab", "a0", "a9", "a10", "Z", "z", "0", "9", "aa", "a-a"}

func TestQueueOrderInGoIsTheQueueOrderInSQL(t *testing.T) {
	t.Parallel()
	conn := rulesConn(t)
	type head struct {
		RunID     string
		CreatedAt time.Time
		Priority  int
	}
	// The queue's own column: queue_rank = 100 - priority (migration 0009).
	before := func(a, b head) bool {
		return store.QueueBefore(a.RunID, a.CreatedAt, 100-a.Priority, false, b.RunID, b.CreatedAt, 100-b.Priority, false)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var heads []head
	for i, id := range trickyIDs {
		heads = append(heads, head{RunID: id, CreatedAt: base.Add(time.Duration(i%3) * time.Microsecond), Priority: []int{50, 90, 0}[i%5%3]})
	}
	rows := make([]string, len(heads))
	for i, h := range heads {
		rows[i] = fmt.Sprintf("('%s', timestamptz '%s', %d)", h.RunID, h.CreatedAt.Format(time.RFC3339Nano), 100-h.Priority)
	}
	inSQL := strings1(t, conn, store.RuleSQL(`/* test */ SELECT r.run_id FROM (VALUES `+strings.Join(rows, ", ")+`) r(run_id, created_at, queue_rank) ORDER BY {{queue_order r}}`))
	sort.Slice(heads, func(i, j int) bool { return before(heads[i], heads[j]) })
	var inGo []string
	for _, h := range heads {
		inGo = append(inGo, h.RunID)
	}
	if !slices.Equal(inGo, inSQL) {
		t.Fatalf("queue order\n in Go:  %v\n in SQL: %v", inGo, inSQL)
	}
	// ahead is the same order.
	ahead := store.RuleSQL(`/* test */ SELECT {{ahead q r}} FROM (SELECT $1::timestamptz AS created_at, $2::text AS run_id, $3::int AS queue_rank) q,
		(SELECT $4::timestamptz AS created_at, $5::text AS run_id, $6::int AS queue_rank) r`)
	for _, a := range heads {
		for _, b := range heads {
			var got bool
			if err := conn.QueryRow(context.Background(), ahead, a.CreatedAt, a.RunID, 100-a.Priority, b.CreatedAt, b.RunID, 100-b.Priority).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != before(a, b) {
				t.Fatalf("%s ahead of %s: SQL %t, Go %t", a.RunID, b.RunID, got, before(a, b))
			}
		}
	}
}

// queue_order_reversed is queue_order backwards, at every level of it: runs that tie on
// priority, on arrival, or on both, come out in exactly the reverse order.
func TestQueueOrderReversedIsTheQueueOrderBackwards(t *testing.T) {
	t.Parallel()
	conn := rulesConn(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make([]string, len(trickyIDs))
	for i, id := range trickyIDs {
		rows[i] = fmt.Sprintf("('%s', timestamptz '%s', %d)", id, base.Add(time.Duration(i%3)*time.Microsecond).Format(time.RFC3339Nano), []int{50, 10, 100}[i%5%3])
	}
	queued := `/* test */ SELECT r.run_id FROM (VALUES ` + strings.Join(rows, ", ") + `) r(run_id, created_at, queue_rank) ORDER BY `
	forwards := strings1(t, conn, store.RuleSQL(queued+`{{queue_order r}}`))
	backwards := strings1(t, conn, store.RuleSQL(queued+`{{queue_order_reversed r}}`))
	slices.Reverse(backwards)
	if !slices.Equal(forwards, backwards) {
		t.Fatalf("queue order\n forwards:            %v\n reversed, backwards: %v", forwards, backwards)
	}
}

func TestNeedKeyInGoIsNeedKeyInSQL(t *testing.T) {
	t.Parallel()
	conn := rulesConn(t)
	key := store.RuleSQL(`/* test */ SELECT {{need_key ro}} FROM (SELECT $1::text[] AS needs) ro`)
	for _, needs := range [][]string{{}, {"board"}, {"board=rpi4", "usb"}, {"a/b=c:d", "x.y-z"}} {
		var got string
		if err := conn.QueryRow(context.Background(), key, needs).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != store.NeedKey(needs) {
			t.Errorf("need key of %v: SQL %q, Go %q", needs, got, store.NeedKey(needs))
		}
	}
}

func TestRoleSlotOrderInGoIsTheOrderInSQL(t *testing.T) {
	t.Parallel()
	conn := rulesConn(t)
	var roles []match.Role
	var names []string
	var needs []string
	for i, id := range trickyIDs {
		r := match.Role{Name: id, Needs: [][]string{{"board"}, {"Board"}, {"board", "usb"}, {"board-x"}}[i%4]}
		roles = append(roles, r)
		names, needs = append(names, r.Name), append(needs, "{"+strings.Join(r.Needs, ",")+"}")
	}
	inSQL := strings1(t, conn, store.RuleSQL(`/* test */ SELECT ro.role FROM unnest($1::text[], $2::text[]) AS x(role, needs),
		LATERAL (SELECT x.role, x.needs::text[] AS needs) ro
		ORDER BY {{need_key ro}} COLLATE "C", ro.role COLLATE "C"`), names, needs)
	if inGo := store.RoleSlotOrder(roles); !slices.Equal(inGo, inSQL) {
		t.Fatalf("role slots\n in Go:  %v\n in SQL: %v", inGo, inSQL)
	}
	if !strings.Contains(store.PromoteSQL(), `COLLATE "C", ro.role COLLATE "C"`) {
		t.Fatal("wake_promote no longer numbers roles by need key and name as bytes")
	}
}

// Random step graphs in random states: a step's runnable flag as heartbeats carry it (SQL)
// is the report path's rule (Go) for every step, with and without a cancel requested.
func TestRunnableInGoIsRunnableInSQL(t *testing.T) {
	t.Parallel()
	conn := rulesConn(t)
	ctx := context.Background()
	runnableSQL := store.RuleSQL(`/* test */ SELECT s.step_id, {{runnable s r}} FROM steps s JOIN runs r ON r.run_id = s.run_id
		WHERE s.run_id = $1 ORDER BY s.ordinal`)
	states := []string{wire.Pending, wire.Running, wire.Succeeded, wire.Failed, wire.Cancelled, wire.Skipped}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		runID, cancelling := fmt.Sprintf("r%d", trial), trial%5 == 0
		if _, err := conn.Exec(ctx, `INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, started_at, cancel_requested_at)
			VALUES ($1, $1, 'client:t', 'RUNNING', '\x00', '[["x"]]', 1, 1, now(), CASE WHEN $2 THEN now() END)`, runID, cancelling); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO run_roles (run_id, role, ordinal, needs) VALUES ($1, 'main', 0, '{x}')`, runID); err != nil {
			t.Fatal(err)
		}
		var steps []store.TestStep
		for i := range 6 {
			st := store.TestStep{ID: fmt.Sprintf("s%d", i), State: states[rng.IntN(len(states))], After: []string{}}
			for j := range i {
				if rng.IntN(3) == 0 {
					st.After = append(st.After, fmt.Sprintf("s%d", j))
				}
			}
			steps = append(steps, st)
			finished := any(nil)
			if wire.Final(st.State) {
				finished = time.Now()
			}
			if _, err := conn.Exec(ctx, `INSERT INTO steps (run_id, step_id, role, ordinal, after, state, finished_at, tries, retries)
				VALUES ($1, $2, 'main', $3, $4, $5, $6, 0, 0)`, runID, st.ID, i, st.After, st.State, finished); err != nil {
				t.Fatal(err)
			}
		}
		type flag struct {
			ID       string
			Runnable bool
		}
		rows, err := conn.Query(ctx, runnableSQL, runID)
		if err != nil {
			t.Fatal(err)
		}
		inSQL, err := pgx.CollectRows(rows, pgx.RowToStructByPos[flag])
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range steps {
			inGo := store.RunnableInGo(steps, i, cancelling)
			if inSQL[i].Runnable != inGo {
				t.Fatalf("run %d step %s (%s, after %v, cancelling %t): SQL %t, Go %t", trial, st.ID, st.State, st.After, cancelling, inSQL[i].Runnable, inGo)
			}
		}
	}
}

// strings1 is the first column of every row sql answers.
func strings1(t *testing.T, conn *pgx.Conn, sql string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Protected heads go first, in arrival order among themselves, whatever their priorities.
func TestProtectedHeadsGoFirstInArrivalOrder(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oldLow := func() (string, time.Time, int, bool) { return "old-low", base, 100, true }
	olderLow := func() (string, time.Time, int, bool) { return "older-low", base.Add(-time.Hour), 100, true }
	newUrgent := func() (string, time.Time, int, bool) { return "new-urgent", base.Add(time.Hour), 0, false }
	before := func(a, b func() (string, time.Time, int, bool)) bool {
		ai, at, ar, ap := a()
		bi, bt, br, bp := b()
		return store.QueueBefore(ai, at, ar, ap, bi, bt, br, bp)
	}
	if !before(oldLow, newUrgent) || before(newUrgent, oldLow) {
		t.Error("a protected low-priority run does not go before a newer urgent one")
	}
	if !before(olderLow, oldLow) || before(oldLow, olderLow) {
		t.Error("among protected runs, arrival does not decide")
	}
}

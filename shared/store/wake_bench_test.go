package store_test

import (
	"context"
	"fmt"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
)

// seedQueue writes depth queued runs needing "board" straight into the tables: the benchmark
// measures the wake, not ten thousand submits. max_attempts is large so the placed run can be
// put back in the queue between iterations.
func seedQueue(b *testing.B, env *apitest.Env, depth int) {
	b.Helper()
	env.Exec(`
		INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, created_at)
		SELECT 'q-' || lpad(i::text, 6, '0'), 'q-' || lpad(i::text, 6, '0'), 'client:b', 'QUEUED', '\x00', '[["board"]]', 1, 1000000,
		       now() - interval '1 hour' + i * interval '1 millisecond'
		FROM generate_series(1, $1) i`, depth)
	env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs) SELECT run_id, 'main', 0, '{board}' FROM runs`)
	env.Exec(`INSERT INTO steps (run_id, step_id, role, ordinal) SELECT run_id, 's1', 'main', 0 FROM runs`)
	env.Exec(`ANALYZE`)
}

// BenchmarkWakeQueued: one WakeQueued over 0, 1,000 and 10,000 queued runs, with no available
// node and with one. With none, the cost must not grow with the queue.
func BenchmarkWakeQueued(b *testing.B) {
	for _, depth := range []int{0, 1000, 10000} {
		for _, available := range []int{0, 1} {
			b.Run(fmt.Sprintf("queued=%d/available=%d", depth, available), func(b *testing.B) {
				var counter pgcount.Counter
				env := apitest.New(b, apitest.Tracer(&counter))
				seedQueue(b, env, depth)
				env.Heartbeat("busy", "b1", false, "board")
				env.Exec(`UPDATE nodes SET draining = true WHERE node_id = 'busy'`)
				if available == 1 {
					env.Heartbeat("free", "b1", false, "board")
				}
				ctx := context.Background()
				var queries int64
				b.ResetTimer()
				for range b.N {
					before := counter.Read()
					res, err := env.Store.WakeQueued(ctx, store.WakeParams{})
					if err != nil {
						b.Fatal(err)
					}
					queries += counter.Read().Since(before).Queries
					if want := min(available, depth); res.Promoted != want {
						b.Fatalf("promoted %d, want %d", res.Promoted, want)
					}
					if res.Promoted > 0 {
						b.StopTimer()
						requeue(b, env)
						b.StartTimer()
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(queries)/float64(b.N), "queries/op")
			})
		}
	}
}

// requeue puts the placed run back at the head of the queue, as if it had lost its node.
func requeue(_ *testing.B, env *apitest.Env) {
	env.Exec(`
		WITH l AS (DELETE FROM leases RETURNING run_id),
		     r AS (UPDATE runs SET state = 'QUEUED', started_at = NULL, deadline_at = NULL, attempt = attempt + 1
		           WHERE run_id IN (SELECT run_id FROM l) RETURNING run_id)
		UPDATE run_roles SET node_id = '' WHERE run_id IN (SELECT run_id FROM r)`)
}

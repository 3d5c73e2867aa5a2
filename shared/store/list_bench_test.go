package store_test

import (
	"context"
	"fmt"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// BenchmarkListQueuedRuns: one page of the newest queued runs (GET /v1/runs?state=QUEUED), each
// carrying its queue_position, over 1,000 and 10,000 queued runs.
func BenchmarkListQueuedRuns(b *testing.B) {
	for _, depth := range []int{1000, 10000} {
		for _, limit := range []int{1, 100} {
			b.Run(fmt.Sprintf("queued=%d/limit=%d", depth, limit), func(b *testing.B) {
				env := apitest.New(b)
				seedQueue(b, env, depth)
				p := store.ListRunsParams{Viewer: store.Viewer{Admin: true}, State: wire.Queued, Limit: limit}
				b.ResetTimer()
				for range b.N {
					runs, _, err := env.Store.ListRuns(context.Background(), p)
					if err != nil || len(runs) != limit || *runs[0].QueuePosition != depth-1 {
						b.Fatalf("%d runs, %v", len(runs), err)
					}
				}
			})
		}
	}
}

// BenchmarkListRunsOfARareState: an owner's page of FAILED runs when all 6,000 of its runs
// SUCCEEDED, among 24,000 runs of other owners in every final state: an empty page, which must
// not cost a walk through the owner's history.
func BenchmarkListRunsOfARareState(b *testing.B) {
	env := apitest.New(b)
	for from := 1; from <= 30000; from += 10000 {
		env.Exec(`
		INSERT INTO runs (run_id, name, owner, state, reason, request_hash, shape, width, max_attempts, created_at, started_at, finished_at)
		SELECT 'done-' || i, 'done-' || i, CASE WHEN i % 5 = 0 THEN 'client:b' ELSE 'client:' || (i % 50) END,
		       (ARRAY['SUCCEEDED', 'FAILED', 'CANCELLED'])[CASE WHEN i % 5 = 0 THEN 1 ELSE 1 + i % 3 END],
		       CASE WHEN i % 5 = 0 OR i % 3 = 0 THEN NULL WHEN i % 3 = 1 THEN 'step_failed' ELSE 'cancelled' END,
		       '\x00', '[["board"]]', 1, 1, now() - i * interval '1 second', now() - i * interval '1 second', now() - i * interval '1 second'
		FROM generate_series($1::int, $1::int + 9999) i`, from)
	}
	env.Exec(`ANALYZE runs`)
	p := store.ListRunsParams{Viewer: store.Viewer{Owner: "client:b"}, State: wire.Failed, Limit: 20}
	b.ResetTimer()
	for range b.N {
		if runs, _, err := env.Store.ListRuns(context.Background(), p); err != nil || len(runs) != 0 {
			b.Fatalf("%d runs, %v", len(runs), err)
		}
	}
}

package store_test

import (
	"context"
	"fmt"
	"testing"

	"mediator/localdev/apitest"
	"mediator/localdev/pgcount"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// BenchmarkExplainWaiting: why a page of 20 queued runs waits, over a fleet of 1,000 and
// 10,000 busy nodes and a queue of 10,000 runs in 20 shapes. The cost is one statement that
// reads the fleet once, however many runs the page shows, and grows with the fleet, not the
// queue.
func BenchmarkExplainWaiting(b *testing.B) {
	for _, nodes := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var counter pgcount.Counter
			env := apitest.New(b, apitest.Tracer(&counter))
			// The nodes, live, every one leased by a running run: every queued run is all_busy.
			env.Exec(`
				INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at, last_seen_at)
				SELECT 'n-' || i, ARRAY['board', 'lab=' || (i % 20), 'node_id=n-' || i], 'b1', now() + interval '1 hour', now()
				FROM generate_series(1, $1) i`, nodes)
			env.Exec(`
				INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, started_at)
				SELECT 'busy-' || i, 'busy-' || i, 'client:b', 'RUNNING', '\x00', '[["board"]]', 1, 1, now() FROM generate_series(1, $1) i`, nodes)
			env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs, node_id) SELECT 'busy-' || i, 'main', 0, '{board}', 'n-' || i FROM generate_series(1, $1) i`, nodes)
			env.Exec(`INSERT INTO leases (node_id, run_id, role, boot_id, expires_at) SELECT 'n-' || i, 'busy-' || i, 'main', 'b1', now() + interval '1 hour' FROM generate_series(1, $1) i`, nodes)
			env.Exec(`
				INSERT INTO runs (run_id, name, owner, state, request_hash, shape, width, max_attempts, created_at)
				SELECT 'q-' || i, 'q-' || i, 'client:b', 'QUEUED', '\x00', '[["board","lab=' || (i % 20) || '"]]', 1, 1, now() - i * interval '1 millisecond'
				FROM generate_series(1, 10000) i`)
			env.Exec(`INSERT INTO run_roles (run_id, role, ordinal, needs) SELECT run_id, 'main', 0, ARRAY['board', 'lab=' || substring(shape from 'lab=([0-9]+)')] FROM runs WHERE state = 'QUEUED'`)
			env.Exec(`INSERT INTO steps (run_id, step_id, role, ordinal) SELECT run_id, 's1', 'main', 0 FROM runs WHERE state = 'QUEUED'`)
			env.Exec(`ANALYZE`)
			ctx := context.Background()
			viewer := store.Viewer{Admin: true}
			page, _, err := env.Store.ListRuns(ctx, store.ListRunsParams{Viewer: viewer, State: wire.Queued, Limit: 20})
			if err != nil || len(page) != 20 {
				b.Fatalf("a page of queued runs: %d, %v", len(page), err)
			}
			var queries int64
			b.ResetTimer()
			for range b.N {
				before := counter.Read()
				if err := env.Store.ExplainWaiting(ctx, store.ExplainWaitingParams{Runs: page, Viewer: viewer}); err != nil {
					b.Fatal(err)
				}
				queries += counter.Read().Since(before).Queries
				if page[0].Waiting == nil || page[0].Waiting.Reason != wire.WaitAllBusy {
					b.Fatalf("waiting %+v", page[0].Waiting)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(queries)/float64(b.N), "queries/op")
		})
	}
}

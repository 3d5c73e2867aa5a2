package store_test

import (
	"context"
	"fmt"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
)

// BenchmarkListQueuedRuns: one page of the newest queued runs (GET /v1/runs?state=QUEUED), each
// carrying its queue_position, over 1,000 and 10,000 queued runs.
func BenchmarkListQueuedRuns(b *testing.B) {
	for _, depth := range []int{1000, 10000} {
		for _, limit := range []int{1, 100} {
			b.Run(fmt.Sprintf("queued=%d/limit=%d", depth, limit), func(b *testing.B) {
				env := apitest.New(b)
				seedQueue(b, env, depth)
				p := store.ListRunsParams{Viewer: store.Viewer{Admin: true}, State: store.Queued, Limit: limit}
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

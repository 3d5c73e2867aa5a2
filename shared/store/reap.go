package store

import "context"

// ReapSummary counts what one reap did.
type ReapSummary struct {
	Expired       int `json:"expired"`
	Cancelled     int `json:"cancelled"`
	TimedOut      int `json:"timed_out"`
	QueueTimedOut int `json:"queue_timed_out"`
	Retired       int `json:"retired"`
	Promoted      int `json:"promoted"`
	Stranded      int `json:"stranded"`
}

// Reap is the scheduled sweep (SPEC.md §5, Reap).
func (s *Store) Reap(ctx context.Context) (ReapSummary, error) {
	return ReapSummary{}, nil
}

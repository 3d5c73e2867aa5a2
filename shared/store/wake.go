package store

import "context"

// WakeResult says what one WakeQueued did.
type WakeResult struct {
	Promoted int
}

// WakeQueued promotes queued runs onto available nodes (SPEC.md §6).
func (s *Store) WakeQueued(ctx context.Context) (WakeResult, error) {
	if s.set.LeaseTTL <= 0 {
		return WakeResult{}, ErrLeaseTTL
	}
	return WakeResult{}, nil
}

package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Events out. Every state change of a run is a row of run_events, and every change of a node's
// health a row of node_history, written by the transaction that made it; while publishing is
// on, a trigger marks it unpublished in the same transaction (the outboxes, migrations 0008 and
// 0015). Publishers claim marked events for a moment, send them, and clear the mark of those
// accepted: a handler its own runs' and nodes' events right after its COMMIT, the reaper
// whatever was left. At least once, never lost; a consumer dedupes by EventID (and orders a
// run's by Seq).

var (
	claimEventsOfRunsStmt = stmt("claim_events_of_runs")
	claimStaleEventsStmt  = stmt("claim_stale_events")
	markPublishedStmt     = stmt("mark_published")
	setPublishingStmt     = stmt("set_publishing")
)

// OutboundEvent is a run event as it is published.
type OutboundEvent struct {
	EventID  int64
	Seq      int64  // its place in its run's history, from 1
	RunKey   string // unique across owners
	RunID    string // the id its owner chose: unique among the owner's runs
	Owner    string
	RunKind  string // the run's kind: run, health_check, hold
	Kind     string
	From     *string
	To       string
	Reason   *string
	Attempt  int
	At       time.Time
	NodeID   *string
	Assigned map[string]string // where the run's roles are as it is published
}

// claimFor is how long a claimed event is left to its publisher before another may send it.
const claimFor = 10 * time.Second

// SetPublishing turns the outbox on or off: whoever knows the configuration calls it at
// start-up (the migrate function at each deploy, make dev). Off, events are only recorded.
func (s *Store) SetPublishing(ctx context.Context, on bool) error {
	_, err := setPublishingStmt.exec(ctx, s.pool, on)
	return err
}

// ClaimEventsOfRuns claims up to limit unpublished events of these runs, oldest first.
func (s *Store) ClaimEventsOfRuns(ctx context.Context, runIDs []string, limit int) ([]OutboundEvent, error) {
	return collect(ctx, s.pool, claimEventsOfRunsStmt, pgx.RowToStructByPos[OutboundEvent],
		named{"runs": runIDs, "limit": limit, "claim_for": claimFor.Seconds()})
}

// ClaimStaleEvents claims up to limit events unpublished for longer than olderThan.
func (s *Store) ClaimStaleEvents(ctx context.Context, olderThan time.Duration, limit int) ([]OutboundEvent, error) {
	return collect(ctx, s.pool, claimStaleEventsStmt, pgx.RowToStructByPos[OutboundEvent],
		named{"older_than": olderThan.Seconds(), "limit": limit, "claim_for": claimFor.Seconds()})
}

// MarkPublished clears the mark of events EventBridge accepted.
func (s *Store) MarkPublished(ctx context.Context, eventIDs []int64) error {
	if len(eventIDs) == 0 {
		return nil
	}
	_, err := markPublishedStmt.exec(ctx, s.pool, eventIDs)
	return err
}

var (
	claimEventsOfNodesStmt      = stmt("claim_events_of_nodes")
	claimNodeEventsStmt         = stmt("claim_node_events")
	markNodeEventsPublishedStmt = stmt("mark_node_events_published")
)

// OutboundNodeEvent is a node's change of health (node_history, kind health), as it is published.
type OutboundNodeEvent struct {
	EventID int64
	NodeID  string
	From    string
	To      string
	Reason  *string
	By      string
	At      time.Time
}

// ClaimEventsOfNodes claims up to limit unpublished events of these nodes, oldest first.
func (s *Store) ClaimEventsOfNodes(ctx context.Context, nodeIDs []string, limit int) ([]OutboundNodeEvent, error) {
	return collect(ctx, s.pool, claimEventsOfNodesStmt, pgx.RowToStructByPos[OutboundNodeEvent],
		named{"nodes": nodeIDs, "limit": limit, "claim_for": claimFor.Seconds()})
}

// ClaimStaleNodeEvents claims up to limit node events unpublished for longer than olderThan,
// oldest first.
func (s *Store) ClaimStaleNodeEvents(ctx context.Context, olderThan time.Duration, limit int) ([]OutboundNodeEvent, error) {
	return collect(ctx, s.pool, claimNodeEventsStmt, pgx.RowToStructByPos[OutboundNodeEvent],
		named{"older_than": olderThan.Seconds(), "limit": limit, "claim_for": claimFor.Seconds()})
}

// MarkNodeEventsPublished clears the mark of node events EventBridge accepted.
func (s *Store) MarkNodeEventsPublished(ctx context.Context, eventIDs []int64) error {
	if len(eventIDs) == 0 {
		return nil
	}
	_, err := markNodeEventsPublishedStmt.exec(ctx, s.pool, eventIDs)
	return err
}

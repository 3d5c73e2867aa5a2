package store

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/wire"
)

// A node's health: healthy, suspect or quarantined (migration 0015, sql/health.sql). The count
// of infrastructure failures moves in the transactions of the reports and the losses that make
// it (Report, loseLease); the agent's own say comes with its heartbeat (heartbeatHealth); an
// admin's with the quarantine routes.

var (
	selfQuarantineStmt  = stmt("self_quarantine")
	liftQuarantineStmt  = stmt("lift_quarantine")
	adminQuarantineStmt = stmt("admin_quarantine")
	nodeHistoryStmt     = stmt("node_history")
	getNodeStmt         = stmt("get_node")
)

// HistoryLimit is how many lines of a node's history GET /v1/nodes/{node_id} shows.
const HistoryLimit = 50

// HealthResult is a node after a change of its health.
type HealthResult struct {
	Node Node
	// CapacityAppeared: a quarantine was lifted and the node is available now. The caller wakes.
	CapacityAppeared bool
	// HealthChanged is the node when the write may have moved its health: its events are the
	// caller's to publish. An admin's write always names it, as its statement does not say
	// whether the node was in another state already (the claim then finds nothing).
	HealthChanged []string
}

// NodeEvent is a line of a node's history: a change of its health ("health": from, to, why) or
// a lease ("lease": to leased or released, the run).
type NodeEvent struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	From   *string   `json:"from"`
	To     string    `json:"to"`
	Reason *string   `json:"reason"`
	RunID  *string   `json:"run_id"`
}

// NodeDetail is a node with its recent history, newest first.
type NodeDetail struct {
	Node    Node        `json:"node"`
	History []NodeEvent `json:"history"`
}

// heartbeatHealth applies what the heartbeat says of the node's own checks: failing
// (p.Unhealthy), the node quarantines itself, unless the system or an admin did already;
// passing, it lifts a quarantine of its own and nobody else's. A routine heartbeat — the node's
// say unchanged — writes nothing.
func (s *Store) heartbeatHealth(ctx context.Context, p wire.Heartbeat, res *HeartbeatResult) error {
	n := res.Node
	self := n.QuarantinedBy != nil && *n.QuarantinedBy == wire.QuarantinedBySelf
	switch {
	case p.Unhealthy != "" && (n.Health != wire.HealthQuarantined || self && (n.HealthReason == nil || *n.HealthReason != p.Unhealthy)):
		h, err := s.healthWrite(ctx, s.pool, selfQuarantineStmt, named{"node_id": p.NodeID, "reason": p.Unhealthy})
		if err != nil {
			return err
		}
		res.Node = h.Node
		res.HealthChanged = movedHealth(res.HealthChanged, n, h.Node)
		// Only what the restart released stays room: this node takes no new work now.
		res.CapacityAppeared = res.CapacityAppeared && (takesWork(h.Node) || res.Released > 0)
	case p.Unhealthy == "" && self:
		h, err := s.healthWrite(ctx, s.pool, liftQuarantineStmt, named{"node_id": p.NodeID, "admin": false, "by": wire.QuarantinedBySelf})
		if err != nil {
			return err
		}
		res.Node = h.Node
		res.HealthChanged = movedHealth(res.HealthChanged, n, h.Node)
		res.CapacityAppeared = res.CapacityAppeared || h.CapacityAppeared
	}
	return nil
}

// movedHealth is changed with the node added when its health went from before's to after's:
// a new reason for a quarantine of its own is no change, and no event.
func movedHealth(changed []string, before, after Node) []string {
	if before.Health == after.Health || slices.Contains(changed, after.NodeID) {
		return changed
	}
	return append(changed, after.NodeID)
}

// healthWrite runs one of the health statements, which answer the node and whether it left a
// quarantine.
func (s *Store) healthWrite(ctx context.Context, q querier, st statement, args named) (HealthResult, error) {
	var n Node
	var lifted bool
	err := st.queryRow(ctx, q, args).Scan(append(n.viewColumns(), &lifted)...)
	if err != nil {
		return HealthResult{}, err
	}
	return HealthResult{Node: n, CapacityAppeared: lifted && takesWork(n)}, nil
}

// QuarantineNode records an admin's quarantine (POST /v1/nodes/{node_id}/quarantine): the node
// takes no new lease until an admin lifts it, and finishes the one it holds. An admin's
// quarantine already there is kept as the first admin gave it.
func (s *Store) QuarantineNode(ctx context.Context, nodeID, by, reason string) (HealthResult, error) {
	if reason == "" {
		reason = "quarantined by " + by
	}
	return adminHealth(s.healthWrite(ctx, s.pool, adminQuarantineStmt, named{"node_id": nodeID, "by": by, "reason": reason}))
}

// adminHealth names the node of an admin's write in HealthChanged (see HealthResult).
func adminHealth(h HealthResult, err error) (HealthResult, error) {
	if err == nil {
		h.HealthChanged = []string{h.Node.NodeID}
	}
	return h, err
}

// LiftQuarantine lifts a node's quarantine, whoever made it (DELETE
// /v1/nodes/{node_id}/quarantine, an admin's), its count reset: healthy, or, when a health
// check applies to it, suspect with the check scheduled in the same transaction — the node
// serves the check alone, and its outcome decides.
func (s *Store) LiftQuarantine(ctx context.Context, nodeID, by string) (HealthResult, error) {
	return adminHealth(inTx(ctx, s, func(tx pgx.Tx) (HealthResult, error) {
		h, err := s.healthWrite(ctx, tx, liftQuarantineStmt, named{"node_id": nodeID, "admin": true, "by": by})
		if err != nil || h.Node.Health != wire.HealthSuspect {
			return h, err
		}
		var scheduled int
		if err := scheduleChecksStmt.queryRow(ctx, tx, named{"nodes": []string{nodeID}}).Scan(&scheduled); err != nil {
			return h, err
		}
		h.Node.HealthCheckDue = h.Node.HealthCheckDue || scheduled > 0
		return h, nil
	}))
}

var (
	scheduleChecksStmt         = stmt("schedule_checks")
	schedulePeriodicChecksStmt = stmt("schedule_periodic_checks")
	finishChecksStmt           = stmt("finish_checks")
)

// ChecksFinished is what applying the outcome of ended health checks did (finish_checks).
type ChecksFinished struct {
	// HealthChanged are the nodes whose health moved: their events are the caller's to publish.
	HealthChanged []string
	// Opened are the nodes open to other work now: the caller wakes the queue.
	Opened []string
}

// queueFinishChecks applies the outcome of the checks that ended on nodes (all of them for
// nil), in the batch's transaction, into f.
func queueFinishChecks(b *pgx.Batch, nodes []string, f *ChecksFinished) {
	finishChecksStmt.queue(b, f.scan, finishChecksArgs(nodes))
}

func (s *Store) finishChecks(ctx context.Context, q querier, nodes []string) (ChecksFinished, error) {
	var f ChecksFinished
	err := f.scan(finishChecksStmt.queryRow(ctx, q, finishChecksArgs(nodes)))
	return f, err
}

// finishChecksArgs are finish_checks' arguments: the nodes, or every node for nil.
func finishChecksArgs(nodes []string) named {
	return named{"all": nodes == nil, "nodes": nonNil(nodes)}
}

func (f *ChecksFinished) scan(row pgx.Row) error { return row.Scan(&f.HealthChanged, &f.Opened) }

// FinishHealthChecks applies the outcome of every health check that ended on nodes (every
// node for nil) by a path that does not apply it itself: a report applies its own check's in
// its transaction, and a loss in its; a cancel's is applied here, after its commit, and the
// reaper's sweep applies what is left (a deadline's end, a cancel whose caller died).
func (s *Store) FinishHealthChecks(ctx context.Context, nodes []string) (ChecksFinished, error) {
	return s.finishChecks(ctx, s.pool, nodes)
}

// periodicChecksBatch bounds the periodic checks one reap schedules; the next reap goes on.
const periodicChecksBatch = 500

// SchedulePeriodicChecks schedules the checks with every_seconds whose time has come on the
// nodes they apply to (schedule_periodic_checks), and answers how many.
func (s *Store) SchedulePeriodicChecks(ctx context.Context) (int, error) {
	var n int
	err := schedulePeriodicChecksStmt.queryRow(ctx, s.pool, named{"batch": periodicChecksBatch}).Scan(&n)
	return n, err
}

// GetNode is one node with its recent history (GET /v1/nodes/{node_id}).
func (s *Store) GetNode(ctx context.Context, nodeID string) (NodeDetail, error) {
	rows, err := getNodeStmt.query(ctx, s.pool, nodeID)
	if err != nil {
		return NodeDetail{}, err
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Node])
	if err != nil {
		return NodeDetail{}, getNodeStmt.fail(err)
	}
	history, err := collect(ctx, s.pool, nodeHistoryStmt, pgx.RowToStructByPos[NodeEvent], nodeID, HistoryLimit)
	if err != nil {
		return NodeDetail{}, err
	}
	if history == nil {
		history = []NodeEvent{}
	}
	return NodeDetail{Node: n, History: history}, nil
}

var (
	putHealthCheckStmt    = stmt("put_health_check")
	getHealthCheckStmt    = stmt("get_health_check")
	listHealthChecksStmt  = stmt("list_health_checks")
	deleteHealthCheckStmt = stmt("delete_health_check")
)

// HealthCheck is a registered health check as its routes show it.
type HealthCheck struct {
	Name         string      `json:"name"`
	Needs        []string    `json:"needs"`
	Steps        []CheckStep `json:"steps"`
	EverySeconds *int        `json:"every_seconds"`
}

// CheckStep is a step of a health check, as a one-role run's (its role is wire.HealthCheckRole).
type CheckStep struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	After   []string        `json:"after"`
	Spec    json.RawMessage `json:"spec"`
	Retries int             `json:"retries"`
}

// PutHealthCheck registers a health check or replaces it whole; created says it is new.
func (s *Store) PutHealthCheck(ctx context.Context, c wire.HealthCheck, by string) (check HealthCheck, created bool, err error) {
	steps := make([]CheckStep, len(c.Steps))
	for i, st := range c.Steps {
		steps[i] = CheckStep{ID: st.ID, Role: st.Role, After: st.After, Spec: st.Spec, Retries: st.Retries}
		if steps[i].After == nil {
			steps[i].After = []string{}
		}
	}
	err = putHealthCheckStmt.queryRow(ctx, s.pool, named{"name": c.Name, "needs": c.Needs, "steps": steps,
		"every_seconds": c.EverySeconds, "by": by}).Scan(&check.Name, &check.Needs, &check.Steps, &check.EverySeconds, &created)
	return check, created, err
}

// GetHealthCheck is one health check (ErrNotFound when none has the name).
func (s *Store) GetHealthCheck(ctx context.Context, name string) (HealthCheck, error) {
	rows, err := getHealthCheckStmt.query(ctx, s.pool, name)
	if err != nil {
		return HealthCheck{}, err
	}
	c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[HealthCheck])
	return c, getHealthCheckStmt.fail(err)
}

// ListHealthChecks is every health check, by name.
func (s *Store) ListHealthChecks(ctx context.Context) ([]HealthCheck, error) {
	return collect(ctx, s.pool, listHealthChecksStmt, pgx.RowToStructByPos[HealthCheck])
}

// DeleteHealthCheck removes a health check and answers it as it was.
func (s *Store) DeleteHealthCheck(ctx context.Context, name string) (HealthCheck, error) {
	rows, err := deleteHealthCheckStmt.query(ctx, s.pool, name)
	if err != nil {
		return HealthCheck{}, err
	}
	c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[HealthCheck])
	return c, deleteHealthCheckStmt.fail(err)
}

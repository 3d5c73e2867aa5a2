package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mediator/shared/wire"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// HeartbeatResult is what the node is told, and what the handler needs to decide on a wake.
type HeartbeatResult struct {
	Node  Node
	Lease *HeldLease
	Steps []NodeStep
	// CapacityAppeared: this heartbeat changed what the queue may place on the node, and the
	// node is available (new, back from an expired advert, drain lifted, labels changed, or
	// a new boot — see heartbeatSQL), or a restart released its run-mates' leases. Only then
	// does the handler wake the queue: a routine heartbeat must not turn the wake into
	// polling.
	CapacityAppeared bool
	// Released is how many leases the restart released (the lost node's and its run-mates').
	Released int
	// RunMates are the run-mates' nodes whose leases the restart released: the caller tells
	// them to look now.
	RunMates []string
	// Runs are the runs that lost the node to its restart (their events are the caller's to
	// publish).
	Runs []string
	// HealthChanged is the node when this heartbeat moved its health (its agent's say, or a
	// restart's loss counted): its events are the caller's to publish. Nil for a routine
	// heartbeat, which writes no health and so costs nothing more.
	HealthChanged []string
	// FlushDeferred: an idle node's routine heartbeat (nothing written but its advert's times),
	// committed without waiting for its WAL flush (heartbeatSQL).
	FlushDeferred bool
}

// HeldLease is the node's lease as the node sees it.
type HeldLease struct {
	RunID     string    `json:"run_id"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// DebugOf: the lease is a debug hold's, of this run (by its key): the agent keeps that run's
	// failed step directories while it holds the lease (heartbeat answers only).
	DebugOf *string `json:"debug_of,omitempty"`
}

// NodeStep is a step the node holds, with what it may do about it (sql/rules.sql node_step).
type NodeStep struct {
	RunID    string          `json:"run_id"`
	StepID   string          `json:"step_id"`
	Role     string          `json:"role"`
	Attempt  int             `json:"attempt"`
	Spec     json.RawMessage `json:"spec"`
	State    string          `json:"state"`
	Runnable bool            `json:"runnable"`
	Cancel   bool            `json:"cancel"`
	// KeepOnFailure: the run keeps a failed step's board in a debug hold; the agent keeps the
	// step's directory with it.
	KeepOnFailure bool `json:"keep_on_failure"`
	// Assigned is the node of every role of the run that holds one.
	Assigned map[string]string `json:"assigned"`
	// Inputs are the outputs of the steps it waits for, by step ({} for one with none).
	Inputs map[string]map[string]string `json:"inputs"`
}

var (
	heartbeatStmt           = stmt("heartbeat")
	heartbeatLockNodeStmt   = stmt("heartbeat_lock_node")
	heartbeatStaleLeaseStmt = stmt("heartbeat_stale_leases")
	nodeWorkStmt            = stmt("node_work")
	listNodesStmt           = stmt("list_nodes")
	listLeasesStmt          = stmt("list_leases")
	drainNodeStmt           = stmt("drain_node")
	undrainNodeStmt         = stmt("undrain_node")
)

// renewSlack: a heartbeat less than this after the last renewal renews nothing.
const renewSlack = time.Second

// Heartbeat registers or refreshes a node's advert, renews the lease it holds under this
// boot, and answers with its steps. A heartbeat under a new boot_id is a restart: the lease
// held under the old boot is released at once and its run loses the node, as on any loss.
//
// A heartbeat that loses a race to another writer of the same node — a promotion onto the
// boot it is replacing, a twin first heartbeat — was refused whole by a constraint, and is
// simply tried again: the next try sees what the other writer committed.
func (s *Store) Heartbeat(ctx context.Context, p wire.Heartbeat) (HeartbeatResult, error) {
	// Every node carries its implicit label (wire.NodeIDLabel): a role that needs it is pinned
	// to the node, by the one matching every run goes through.
	labels := append([]string{wire.NodeIDLabel(p.NodeID)}, p.Labels...)
	slices.Sort(labels)
	labels = slices.Compact(labels)
	args := named{
		"node_id": p.NodeID, "boot_id": p.BootID, "labels": labels, "draining": p.Draining, "unhealthy": p.Unhealthy,
		"advert_ttl": s.set.AdvertTTL.Seconds(), "lease_ttl": s.set.LeaseTTL.Seconds(), "slack": renewSlack.Seconds(),
		// Alone in its transaction here; heartbeatAfterRestart runs it among the writes of a
		// restart, which must wait for their flush.
		"defer_flush": true,
	}
	var err error
	for range 4 {
		var res HeartbeatResult
		var restarted bool
		res, restarted, err = scanHeartbeat(heartbeatStmt.queryRow(ctx, s.pool, args))
		if err == nil && restarted {
			res, err = s.heartbeatAfterRestart(ctx, p, args)
		}
		if err == nil {
			err = s.heartbeatHealth(ctx, p, &res)
		}
		if !errors.Is(err, ErrRetry) && !errors.Is(err, ErrNodeChanged) {
			return res, err
		}
	}
	return HeartbeatResult{}, err
}

// heartbeatAfterRestart releases the lease held under the node's previous boot, then takes
// the advert, in one transaction, the node locked first (lock.go).
func (s *Store) heartbeatAfterRestart(ctx context.Context, p wire.Heartbeat, args named) (HeartbeatResult, error) {
	args = maps.Clone(args)
	args["defer_flush"] = false
	return inTx(ctx, s, func(tx pgx.Tx) (HeartbeatResult, error) {
		if _, err := heartbeatLockNodeStmt.exec(ctx, tx, p.NodeID); err != nil {
			return HeartbeatResult{}, err
		}
		stale, err := collect(ctx, tx, heartbeatStaleLeaseStmt, pgx.RowToStructByPos[leaseRef], p.NodeID, p.BootID)
		if err != nil {
			return HeartbeatResult{}, err
		}
		released, own := 0, 0
		var runs, mates []string
		moved := false
		for _, l := range stale {
			lost, err := s.loseLease(ctx, tx, lostLease{leaseRef: l, Reason: wire.ReasonNodeRestarted, BootNot: p.BootID, NewBoot: p.BootID})
			if err != nil {
				return HeartbeatResult{}, err
			}
			moved = moved || lost.healthChanged
			released += lost.released
			mates = append(mates, lost.mates...)
			if lost.lost {
				own++
				runs = append(runs, lost.runID)
			}
		}
		res, restarted, err := scanHeartbeat(heartbeatStmt.queryRow(ctx, tx, args))
		if err != nil {
			return HeartbeatResult{}, err
		}
		if restarted {
			// A lease under the old boot appeared after we released one: only a concurrent
			// promotion reading the old advert could do that. Let the caller retry.
			return HeartbeatResult{}, ErrRetry
		}
		res.Released, res.Runs, res.RunMates = released, runs, mates
		if moved {
			res.HealthChanged = []string{p.NodeID}
		}
		// The run-mates' nodes are free to take work whatever this node says (this node, by
		// its new boot, as scanHeartbeat judged). Judged by this node alone, a restart that came
		// back draining left its run-mates idle beside the queue.
		res.CapacityAppeared = res.CapacityAppeared || released > own
		return res, nil
	})
}

func scanHeartbeat(row pgx.Row) (res HeartbeatResult, restarted bool, err error) {
	var (
		changed   bool
		nodeID    *string
		state     *string
		runID     *string
		epoch     *int64
		expiresAt *time.Time
		debugOf   *string
		lastSeen  *time.Time
		labels    []string
		bootID    *string
		draining  *bool
		drainBy   *string
		health    healthScan
	)
	if err := row.Scan(&restarted, &changed, &nodeID, &state, &labels, &bootID, &draining, &drainBy, &lastSeen,
		&health.health, &health.reason, &health.failures, &health.since, &health.by, &health.due,
		&runID, &epoch, &expiresAt, &debugOf, &res.Steps, &res.FlushDeferred); err != nil {
		return res, false, err
	}
	if restarted {
		return res, true, nil
	}
	if nodeID == nil {
		// The node was removed between the statement's snapshot and its update: the next
		// try registers it anew.
		return res, false, fmt.Errorf("%w: the node was removed during its heartbeat", ErrRetry)
	}
	res.Node = Node{NodeID: *nodeID, State: *state, Labels: labels, BootID: *bootID, Draining: *draining,
		DrainRequestedBy: drainBy, LastSeenAt: *lastSeen}
	health.into(&res.Node)
	if runID != nil {
		res.Lease = &HeldLease{RunID: *runID, Epoch: *epoch, ExpiresAt: *expiresAt, DebugOf: debugOf}
	}
	// Capacity appeared only if the node is now available to the queue.
	res.CapacityAppeared = changed && takesWork(res.Node)
	return res, false, nil
}

// healthScan is a node's health as a statement that may find no node answers it (NULLs).
type healthScan struct {
	health   *string
	reason   *string
	failures *int
	since    *time.Time
	by       *string
	due      *bool
}

func (h healthScan) into(n *Node) {
	if h.health == nil {
		return
	}
	n.Health, n.HealthReason, n.InfraFailures, n.HealthSince, n.QuarantinedBy, n.HealthCheckDue =
		*h.health, h.reason, *h.failures, *h.since, h.by, *h.due
}

// takesWork: the queue may place on the node now, as its view says (rules.sql takes_work, and
// no lease): idle, and not quarantined.
func takesWork(n Node) bool {
	return n.State == wire.NodeIdle && n.Health != wire.HealthQuarantined
}

// ListNodesParams pages through the fleet in node_id order.
type ListNodesParams struct {
	After string // the last node of the page before; "" from the first
	Limit int    // 0: every node after After
}

// ListNodes is the fleet with each node's state (GET /v1/nodes), a page of it when p.Limit is
// set.
func (s *Store) ListNodes(ctx context.Context, p ListNodesParams) ([]Node, error) {
	var limit *int
	if p.Limit > 0 {
		limit = &p.Limit
	}
	return collect(ctx, s.pool, listNodesStmt, pgx.RowToStructByPos[Node], named{"after": p.After, "limit": limit})
}

// DrainNode records an admin's drain of a node (POST /v1/nodes/{node_id}/drain): it takes no
// new work until an admin lifts it, whatever its own heartbeat says. The first asker is kept.
func (s *Store) DrainNode(ctx context.Context, nodeID, by string) (Node, error) {
	rows, err := drainNodeStmt.query(ctx, s.pool, named{"node_id": nodeID, "by": by})
	if err != nil {
		return Node{}, err
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Node])
	return n, drainNodeStmt.fail(err)
}

// UndrainResult is the node after an admin lifted its drain.
type UndrainResult struct {
	Node Node
	// CapacityAppeared: a drain was lifted and the node is available now. The caller wakes.
	CapacityAppeared bool
}

// UndrainNode lifts an admin's drain (DELETE /v1/nodes/{node_id}/drain); the node's own drain,
// if its heartbeat says so, stays.
func (s *Store) UndrainNode(ctx context.Context, nodeID string) (UndrainResult, error) {
	var n Node
	var lifted *bool
	err := undrainNodeStmt.queryRow(ctx, s.pool, named{"node_id": nodeID}).Scan(append(n.viewColumns(), &lifted)...)
	if err != nil {
		return UndrainResult{}, err
	}
	return UndrainResult{Node: n, CapacityAppeared: lifted != nil && *lifted && takesWork(n)}, nil
}

// viewColumns are where a row of node_view (sql/nodes.sql) goes, in its order: for a statement
// that answers more columns after it.
func (n *Node) viewColumns() []any {
	return []any{&n.NodeID, &n.State, &n.Labels, &n.BootID, &n.Draining, &n.DrainRequestedBy, &n.LastSeenAt,
		&n.Health, &n.HealthReason, &n.InfraFailures, &n.HealthSince, &n.QuarantinedBy, &n.HealthCheckDue,
		&n.RunID, &n.RunOwner, &n.RunKind, &n.Role, &n.LeasedAt}
}

// AvailableNode is a node the queue may be placed on now.
type AvailableNode struct {
	NodeID string
	Labels []string
	// Suspect: the planner takes it only when no healthy node serves.
	Suspect bool
	// ReservedFor: the health check due on the node, the one run it serves ("" for none).
	ReservedFor string
}

// ListLeases is who holds what (GET /v1/leases).
func (s *Store) ListLeases(ctx context.Context) ([]Lease, error) {
	return collect(ctx, s.pool, listLeasesStmt, pgx.RowToStructByPos[Lease])
}

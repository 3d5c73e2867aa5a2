package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
	"mediator/shared/wire"
)

// Nodes leave the fleet by removal (DELETE /v1/nodes/{node_id}) or, silent past
// NODE_RETIRE_AFTER, by the reaper; either way the queued runs that no node left could ever
// serve fail no_capable_node, unless they asked to wait for capacity.

var (
	removeNodeLockStmt   = stmt("remove_node_lock")
	removeNodeStmt       = stmt("remove_node")
	retireNodesStmt      = stmt("retire_nodes")
	fleetPrintStmt       = stmt("fleet_print")
	unservableShapesStmt = stmt("unservable_shapes")
	endUnservableStmt    = stmt("end_unservable")
)

// RemoveResult is what removing a node did.
type RemoveResult struct {
	Released   int `json:"released"`    // leases released (the node's and its run-mates')
	Unservable int `json:"runs_failed"` // queued runs no remaining node could ever serve
	// CapacityAppeared: leases were released, or a failed run was a starving one whose
	// protection kept nodes from younger runs. The caller wakes the queue exactly then.
	CapacityAppeared bool `json:"-"`
	// Runs are the runs that lost the node (their events are the caller's to publish).
	Runs []string `json:"-"`
	// RunMates are the run-mates' nodes whose leases went with it: the caller tells them to
	// look now.
	RunMates []string `json:"-"`
}

// RemoveNode takes a node out of the fleet. A run holding it loses it (reason node_removed);
// then the queued runs no remaining node could serve fail.
func (s *Store) RemoveNode(ctx context.Context, nodeID string) (RemoveResult, error) {
	lost, err := inTx(ctx, s, func(tx pgx.Tx) (lostRun, error) {
		var epoch *int64
		if err := removeNodeLockStmt.queryRow(ctx, tx, nodeID).Scan(&epoch); err != nil {
			return lostRun{}, err
		}
		var lost lostRun
		if epoch != nil {
			var err error
			if lost, err = s.loseLease(ctx, tx, lostLease{leaseRef: leaseRef{nodeID, *epoch}, Reason: wire.ReasonNodeRemoved}); err != nil {
				return lostRun{}, err
			}
		}
		tag, err := removeNodeStmt.exec(ctx, tx, nodeID)
		if err == nil && tag.RowsAffected() == 0 {
			return lostRun{}, ErrNotFound
		}
		return lost, err
	})
	if err != nil {
		return RemoveResult{}, err
	}
	released := lost.released
	// The removal is committed: from here a failure must not turn the answer into an error.
	// The runs left unfailed are failed by the next removal or retirement.
	unservable, err := s.failUnservable(ctx)
	if err != nil {
		s.log.Warn("failing unservable runs after a node's removal", "node_id", nodeID, "error", err.Error())
	}
	res := RemoveResult{Released: released, Unservable: unservable.runs, RunMates: lost.mates,
		CapacityAppeared: released > 0 || unservable.madeRoom()}
	if lost.lost {
		res.Runs = []string{lost.runID}
	}
	return res, nil
}

// reapRetired is the reaper's step 6: nodes silent past NODE_RETIRE_AFTER leave the fleet,
// and with them the queued runs only they could serve.
func (s *Store) reapRetired(ctx context.Context, sum *ReapSummary) (bool, error) {
	for inTime(ctx) {
		tag, err := retireNodesStmt.exec(ctx, s.pool, named{"retire": s.set.RetireAfter.Seconds(), "batch": reapBatch})
		if err != nil {
			return false, err
		}
		sum.Retired += int(tag.RowsAffected())
		if tag.RowsAffected() < reapBatch {
			break
		}
	}
	if sum.Retired == 0 {
		return false, nil
	}
	failed, err := s.failUnservable(ctx)
	sum.Unservable += failed.runs
	return failed.madeRoom(), err
}

// unservableBatch bounds each transaction that fails unservable runs.
const unservableBatch = 500

// failUnservable fails the queued runs that no node of the fleet, live or not, could ever
// serve, and says what it ended.
func (s *Store) failUnservable(ctx context.Context) (endedRuns, error) {
	var failed endedRuns
	var fleetPrint string
	if err := fleetPrintStmt.queryRow(ctx, s.pool).Scan(&fleetPrint); err != nil {
		return failed, err
	}
	type queuedShape struct {
		Shape string
		Needs [][]string
	}
	shapes, err := collect(ctx, s.pool, unservableShapesStmt, pgx.RowToStructByPos[queuedShape])
	if err != nil || len(shapes) == 0 {
		return failed, err
	}
	fleet, err := s.ListNodes(ctx, ListNodesParams{})
	if err != nil {
		return failed, err
	}
	for _, q := range shapes {
		shape := q.Shape
		if q.Needs == nil || servable(q.Needs, fleet) {
			continue // nil: its runs left the queue since the read
		}
		for {
			ended, err := s.endRuns(ctx, s.pool, ending{
				stmt: endUnservableStmt, from: wire.Queued, state: wire.Failed, reason: wire.ReasonNoCapableNode,
				kind: "unservable", pendingTo: wire.Skipped,
				args: named{"shape": shape, "fleet": fleetPrint, "batch": unservableBatch},
			})
			if err != nil {
				return failed, err
			}
			failed.runs += ended.runs
			failed.unblocked += ended.unblocked
			if ended.runs < unservableBatch {
				break
			}
		}
	}
	return failed, nil
}

// servable reports whether some matching of a shape's roles (their needs) onto the fleet exists.
func servable(needs [][]string, fleet []Node) bool {
	roles := shapeRoles(needs)
	nodes := make([]match.Node, len(fleet))
	for i, n := range fleet {
		nodes[i] = match.Node{ID: n.NodeID, Labels: n.Labels}
	}
	_, unmet := match.Assign(roles, nodes, "")
	return len(unmet) == 0
}

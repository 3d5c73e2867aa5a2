package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
)

// HeartbeatParams is one node's advert.
type HeartbeatParams struct {
	NodeID   string
	BootID   string
	Labels   []string // sorted, without duplicates
	Draining bool
}

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
}

// HeldLease is the node's lease as the node sees it.
type HeldLease struct {
	RunID     string    `json:"run_id"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
}

// NodeStep is a step the node holds, with what it may do about it.
type NodeStep struct {
	RunID    string          `json:"run_id"`
	StepID   string          `json:"step_id"`
	Spec     json.RawMessage `json:"spec"`
	State    string          `json:"state"`
	Runnable bool            `json:"runnable"`
	Cancel   bool            `json:"cancel"`
}

// heartbeatSQL is the whole routine heartbeat in one statement, so it costs one round trip:
// register or refresh the advert, renew the lease held under this boot, read the node's steps.
//
// It writes only what is due. The advert and the lease are renewed unless the last renewal is
// less than a second old (renewSlack), and the advert is rewritten at once when it changed:
// a node that polls faster than once a second costs reads, not commits — before this, agents
// polling for work made every heartbeat a WAL flush and starved everything else.
//
// The advert is only written when no lease is held under another boot (stale is empty). A
// restart has to release that lease in the same transaction as the boot changes — the
// deferred FK leases_held_under_current_boot refuses anything else — and that needs the run's
// row lock first, so it goes through heartbeatAfterRestart instead.
const heartbeatSQL = `
/* heartbeat */
WITH prev AS (
    SELECT node_id, labels, boot_id, draining, last_seen_at, advert_expires_at
    FROM nodes WHERE node_id = @node_id::text
), stale AS (
    SELECT run_id, epoch FROM leases WHERE node_id = @node_id::text AND boot_id <> @boot_id::text
), fresh AS (
    SELECT 1 FROM prev WHERE boot_id = @boot_id::text AND labels = @labels::text[] AND draining = @draining::bool
      AND advert_expires_at > now() + (@advert_ttl::float8 - @slack::float8) * interval '1 second'
), ins AS (
    INSERT INTO nodes (node_id, labels, boot_id, draining, advert_expires_at, last_seen_at)
    SELECT @node_id::text, @labels::text[], @boot_id::text, @draining::bool,
           now() + @advert_ttl::float8 * interval '1 second', now()
    WHERE NOT EXISTS (SELECT 1 FROM prev)
    RETURNING node_id, labels, boot_id, draining, last_seen_at
), upd AS (
    UPDATE nodes SET labels = @labels::text[], boot_id = @boot_id::text, draining = @draining::bool,
        advert_expires_at = now() + @advert_ttl::float8 * interval '1 second', last_seen_at = now()
    WHERE node_id = @node_id::text AND NOT EXISTS (SELECT 1 FROM fresh) AND NOT EXISTS (SELECT 1 FROM stale)
    RETURNING node_id, labels, boot_id, draining, last_seen_at
), node AS (
    SELECT * FROM ins
    UNION ALL SELECT * FROM upd
    UNION ALL SELECT node_id, labels, boot_id, draining, last_seen_at FROM prev WHERE EXISTS (SELECT 1 FROM fresh)
), pulse AS (
    -- The system accepted a heartbeat (see heartbeat_pulse): at most one write a second, and
    -- never a wait — a heartbeat that finds the row being written leaves it to that one.
    UPDATE heartbeat_pulse p SET heard_at = now(),
        quiet_from = CASE WHEN p.heard_at < now() - @lease_ttl::float8 * interval '1 second' THEN p.heard_at ELSE p.quiet_from END,
        quiet_until = CASE WHEN p.heard_at < now() - @lease_ttl::float8 * interval '1 second' THEN now() ELSE p.quiet_until END
    WHERE p.only_row IN (SELECT only_row FROM heartbeat_pulse
                         WHERE coalesce(heard_at < now() - @slack::float8 * interval '1 second', true)
                         FOR UPDATE SKIP LOCKED)
), held AS (
    SELECT run_id, role, epoch, expires_at FROM leases
    WHERE node_id = @node_id::text AND boot_id = @boot_id::text AND EXISTS (SELECT 1 FROM node)
), renew AS (
    UPDATE leases SET expires_at = now() + @lease_ttl::float8 * interval '1 second'
    WHERE node_id = @node_id::text AND boot_id = @boot_id::text AND EXISTS (SELECT 1 FROM node)
      AND expires_at < now() + (@lease_ttl::float8 - @slack::float8) * interval '1 second'
    RETURNING run_id, role, epoch, expires_at
), lease AS (
    SELECT * FROM renew UNION ALL SELECT * FROM held WHERE NOT EXISTS (SELECT 1 FROM renew)
)
SELECT
    EXISTS (SELECT 1 FROM stale),
    (SELECT boot_id FROM prev),
    -- What makes the node newly usable. A new boot counts even on a free node: a promotion
    -- that chose it under the old boot is refused at its COMMIT (leases_held_under_current_boot)
    -- once this commits, and its wake does not come back; this heartbeat's wake stands in.
    coalesce((SELECT advert_expires_at <= now() OR draining AND NOT @draining::bool OR labels <> @labels::text[]
                     OR boot_id <> @boot_id::text FROM prev), true),
    node.node_id, node.labels, node.boot_id, node.draining, node.last_seen_at,
    lease.run_id, lease.epoch, lease.expires_at,
    ` + leaseStepsSQL + `
FROM (SELECT 1) one
LEFT JOIN node ON true
LEFT JOIN lease ON true`

// leaseStepsSQL is the steps a lease gives its node (the lease is the row "lease": run_id,
// role), as JSON, with what the node may do about each.
const leaseStepsSQL = `(SELECT coalesce(json_agg(json_build_object(
        'run_id', s.run_id, 'step_id', s.step_id, 'spec', s.spec, 'state', s.state,
        'runnable', s.state = 'PENDING' AND r.cancel_requested_at IS NULL AND NOT EXISTS (
            SELECT 1 FROM steps d WHERE d.run_id = s.run_id AND d.step_id = ANY (s.after)
            AND d.state <> 'SUCCEEDED'),
        'cancel', r.cancel_requested_at IS NOT NULL) ORDER BY s.ordinal), '[]')
     FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.role = lease.role
     WHERE r.run_id = lease.run_id AND s.state IN ('PENDING', 'RUNNING'))`

// nodeWorkSQL is the lease a node holds under its boot, and the steps it gives.
const nodeWorkSQL = `
/* node work */
SELECT lease.run_id, lease.epoch, lease.expires_at, ` + leaseStepsSQL + `
FROM leases lease WHERE lease.node_id = $1 AND lease.boot_id = $2`

// renewSlack: a heartbeat less than this after the last renewal renews nothing.
const renewSlack = time.Second

// Heartbeat registers or refreshes a node's advert, renews the lease it holds under this
// boot, and answers with its steps. A heartbeat under a new boot_id is a restart: the lease
// held under the old boot is released at once and its run loses the node (SPEC.md §7).
//
// A heartbeat that loses a race to another writer of the same node — a promotion onto the
// boot it is replacing, a twin first heartbeat — was refused whole by a constraint, and is
// simply tried again: the next try sees what the other writer committed.
func (s *Store) Heartbeat(ctx context.Context, p HeartbeatParams) (HeartbeatResult, error) {
	args := named{
		"node_id": p.NodeID, "boot_id": p.BootID, "labels": p.Labels, "draining": p.Draining,
		"advert_ttl": s.set.AdvertTTL.Seconds(), "lease_ttl": s.set.LeaseTTL.Seconds(), "slack": renewSlack.Seconds(),
	}
	var err error
	for range 4 {
		var res HeartbeatResult
		var restarted bool
		res, restarted, err = scanHeartbeat(s.pool.QueryRow(ctx, heartbeatSQL, args))
		err = translate(err)
		if err == nil && restarted {
			res, err = s.heartbeatAfterRestart(ctx, p, args)
		}
		if !errors.Is(err, ErrRetry) && !errors.Is(err, ErrNodeTaken) {
			return res, err
		}
	}
	return HeartbeatResult{}, err
}

// heartbeatAfterRestart releases the lease held under the node's previous boot, then takes
// the advert, in one transaction.
//
// Lock order, for every writer in this package: node, then run, then lease. The routine
// heartbeat holds its node row while it renews the lease; when this path took the lease
// before the node, the two deadlocked on every restart under load.
func (s *Store) heartbeatAfterRestart(ctx context.Context, p HeartbeatParams, args named) (HeartbeatResult, error) {
	var res HeartbeatResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM nodes WHERE node_id = $1 FOR UPDATE`, p.NodeID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT node_id, epoch FROM leases WHERE node_id = $1 AND boot_id <> $2`, p.NodeID, p.BootID)
		if err != nil {
			return err
		}
		stale, err := pgx.CollectRows(rows, pgx.RowToStructByPos[leaseRef])
		if err != nil {
			return err
		}
		released, own := 0, 0
		for _, l := range stale {
			lost, n, err := s.loseLease(ctx, tx, lostLease{leaseRef: l, Reason: ReasonNodeRestarted, BootNot: p.BootID})
			if err != nil {
				return err
			}
			released += n
			if lost {
				own++
			}
		}
		var restarted bool
		res, restarted, err = scanHeartbeat(tx.QueryRow(ctx, heartbeatSQL, args))
		if err != nil {
			return err
		}
		if restarted {
			// A lease under the old boot appeared after we released one: only a concurrent
			// promotion reading the old advert could do that. Let the caller retry.
			return ErrRetry
		}
		res.Released = released
		// The run-mates' nodes are free to take work whatever this node says (this node, by
		// its new boot, as scanHeartbeat judged). Judged by this node alone, a restart that came
		// back draining left its run-mates idle beside the queue.
		res.CapacityAppeared = res.CapacityAppeared || released > own
		return nil
	})
	return res, err
}

// NodeWork is the lease a node holds under bootID and the steps it gives (nil when none): what
// a result answers a node whose report just freed it, when the wake placed a run on it.
func (s *Store) NodeWork(ctx context.Context, nodeID, bootID string) (*HeldLease, []NodeStep, error) {
	var lease HeldLease
	var steps []NodeStep
	err := s.pool.QueryRow(ctx, nodeWorkSQL, nodeID, bootID).Scan(&lease.RunID, &lease.Epoch, &lease.ExpiresAt, &steps)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, translate(err)
	}
	return &lease, steps, nil
}

func scanHeartbeat(row pgx.Row) (res HeartbeatResult, restarted bool, err error) {
	var (
		prevBoot  *string
		changed   bool
		nodeID    *string
		runID     *string
		epoch     *int64
		expiresAt *time.Time
		lastSeen  *time.Time
		labels    []string
		bootID    *string
		draining  *bool
	)
	if err := row.Scan(&restarted, &prevBoot, &changed, &nodeID, &labels, &bootID, &draining, &lastSeen,
		&runID, &epoch, &expiresAt, &res.Steps); err != nil {
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
	res.Node = Node{NodeID: *nodeID, Labels: labels, BootID: *bootID, Draining: *draining, LastSeenAt: *lastSeen, State: "idle"}
	if res.Node.Draining {
		res.Node.State = "draining"
	}
	if runID != nil {
		res.Lease = &HeldLease{RunID: *runID, Epoch: *epoch, ExpiresAt: *expiresAt}
		res.Node.State = "leased"
	}
	// Capacity appeared only if the node is now available to the queue.
	res.CapacityAppeared = changed && res.Lease == nil && !res.Node.Draining
	return res, false, nil
}

// ListNodes is the whole fleet with each node's state (GET /v1/nodes).
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT n.node_id,
		       CASE WHEN l.node_id IS NOT NULL THEN 'leased'
		            WHEN n.advert_expires_at <= now() THEN 'offline'
		            WHEN n.draining THEN 'draining'
		            ELSE 'idle' END,
		       n.labels, n.boot_id, n.draining, n.last_seen_at
		FROM nodes n LEFT JOIN leases l ON l.node_id = n.node_id
		ORDER BY n.node_id`)
	if err != nil {
		return nil, translate(err)
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Node])
	return nodes, translate(err)
}

// AvailableNode is a node the queue may be placed on now.
type AvailableNode struct {
	NodeID string
	Labels []string
}

// ListLeases is who holds what (GET /v1/leases). alive is judged by the lease alone.
func (s *Store) ListLeases(ctx context.Context) ([]Lease, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT node_id, run_id, role, epoch, expires_at, expires_at > now()
		FROM leases ORDER BY node_id`)
	if err != nil {
		return nil, translate(err)
	}
	leases, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Lease])
	return leases, translate(err)
}

// RemoveResult is what removing a node did.
type RemoveResult struct {
	Released   int `json:"released"`    // leases released (the node's and its run-mates')
	Unservable int `json:"runs_failed"` // queued runs no remaining node could ever serve
	// CapacityAppeared: leases were released, or a failed run was a starving one whose
	// protection kept nodes from younger runs. The caller wakes the queue exactly then.
	CapacityAppeared bool `json:"-"`
}

// RemoveNode takes a node out of the fleet (DELETE /v1/nodes/{node_id}). A run holding it loses
// it (reason node_removed); then queued runs that no remaining node could ever serve fail
// no_capable_node, unless they asked to wait for capacity.
func (s *Store) RemoveNode(ctx context.Context, nodeID string) (RemoveResult, error) {
	var res RemoveResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var epoch *int64
		err := tx.QueryRow(ctx, `
			SELECT (SELECT epoch FROM leases l WHERE l.node_id = n.node_id)
			FROM nodes n WHERE n.node_id = $1 FOR UPDATE OF n`, nodeID).Scan(&epoch)
		if err != nil {
			return err
		}
		if epoch != nil {
			_, n, err := s.loseLease(ctx, tx, lostLease{leaseRef: leaseRef{nodeID, *epoch}, Reason: ReasonNodeRemoved})
			if err != nil {
				return err
			}
			res.Released = n
		}
		tag, err := tx.Exec(ctx, `DELETE FROM nodes WHERE node_id = $1`, nodeID)
		if err == nil && tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return err
	})
	if err != nil {
		return RemoveResult{}, err
	}
	// The removal is committed: from here a failure must not turn the answer into an error.
	// The runs left unfailed are failed by the next removal or retirement.
	unservable, err := s.failUnservable(ctx)
	if err != nil {
		s.log.Warn("failing unservable runs after a node's removal", "node_id", nodeID, "error", err.Error())
	}
	res.Unservable = unservable.runs
	res.CapacityAppeared = res.Released > 0 || unservable.madeRoom()
	return res, nil
}

// unservableBatch bounds each transaction that fails unservable runs.
const unservableBatch = 500

// fleetPrintSQL fingerprints the fleet: its nodes and their labels.
const fleetPrintSQL = `SELECT coalesce(md5(string_agg(node_id || ':' || array_to_string(labels, ','), ';' ORDER BY node_id)), '') FROM nodes`

// unservableDue selects one batch of queued runs of a shape — but only while the fleet is
// still the fleet the decision was made over (same nodes, same labels): a node that joined in
// between could serve them.
const unservableDue = `
	SELECT run_id FROM runs
	WHERE state = 'QUEUED' AND shape = @shape::text AND NOT wait_for_capacity
	  AND (` + fleetPrintSQL + `) = @fleet::text
	ORDER BY created_at, run_id LIMIT @batch::int
	FOR UPDATE SKIP LOCKED`

// failUnservable fails the queued runs that no node of the fleet, live or not, could ever
// serve (SPEC.md §5, reap step 6; DELETE /v1/nodes), and says what it ended.
func (s *Store) failUnservable(ctx context.Context) (endedRuns, error) {
	var failed endedRuns
	var fleetPrint string
	if err := s.pool.QueryRow(ctx, fleetPrintSQL).Scan(&fleetPrint); err != nil {
		return failed, translate(err)
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT shape FROM runs WHERE state = 'QUEUED' AND NOT wait_for_capacity`)
	if err != nil {
		return failed, translate(err)
	}
	shapes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(shapes) == 0 {
		return failed, translate(err)
	}
	fleet, err := s.ListNodes(ctx)
	if err != nil {
		return failed, err
	}
	for _, shape := range shapes {
		if servable(shape, fleet) {
			continue
		}
		for {
			ended, err := s.endRuns(ctx, s.pool, ending{
				due: unservableDue, from: Queued, state: Failed, reason: ReasonNoCapableNode,
				kind: "unservable", pendingTo: Skipped,
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

// servable reports whether some matching of the shape's roles onto the fleet exists.
func servable(shape string, fleet []Node) bool {
	var needs [][]string
	if err := json.Unmarshal([]byte(shape), &needs); err != nil {
		return true // not ours to judge; never fail a run on a parse error
	}
	roles := shapeRoles(needs)
	nodes := make([]match.Node, len(fleet))
	for i, n := range fleet {
		nodes[i] = match.Node{ID: n.NodeID, Labels: n.Labels}
	}
	_, unmet := match.Assign(roles, nodes, "")
	return len(unmet) == 0
}

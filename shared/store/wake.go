package store

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
)

// WakeResult says what one WakeQueued did.
type WakeResult struct {
	Promoted int
	// Walked is how many queued runs were considered. It stays 0 when nothing could be
	// placed: then the wake costs one query, whatever the depth of the queue.
	Walked int
	Sweeps int
}

// maxSweeps bounds the fresh re-sweeps after a lost race. A race is only lost to another
// writer that changed the fleet or the queue, and that writer wakes the queue itself after its
// own commit, so a few sweeps are enough to never leave a run next to a free node.
const maxSweeps = 4

// WakeQueued promotes queued runs onto available nodes (SPEC.md §6): in arrival order among
// runs that compete for the same nodes, past runs that cannot be placed (backfill), but never
// onto a node a run older than STARVATION_SECONDS could use. One transaction per promotion,
// each a conditional update, so concurrent wakes are harmless and a failure never undoes an
// earlier promotion. It runs inline, after the caller's commit; it starts no goroutine.
func (s *Store) WakeQueued(ctx context.Context) (WakeResult, error) {
	if s.set.LeaseTTL <= 0 {
		return WakeResult{}, ErrLeaseTTL
	}
	var res WakeResult
	for range maxSweeps {
		res.Sweeps++
		raced, err := s.sweep(ctx, &res)
		if err != nil || !raced {
			return res, err
		}
	}
	return res, nil
}

// wakeStartSQL is the idle cost of a wake: one query that answers nothing when the queue is
// empty or no node is available, so neither case walks anything.
const wakeStartSQL = `
	SELECT n.node_id, n.labels FROM nodes n
	WHERE EXISTS (SELECT 1 FROM runs WHERE state = 'QUEUED')
	  AND n.advert_expires_at > now() AND NOT n.draining
	  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id)
	ORDER BY n.node_id`

// headColumns describe a queued run as the wake needs it. protected: older than the
// starvation bound, so younger runs may not take the nodes it could use.
const headColumns = `r.run_id, r.shape, r.created_at,
	r.created_at < now() - @starvation::float8 * interval '1 second',
	(SELECT json_agg(json_build_object('Name', ro.role, 'Needs', ro.needs) ORDER BY ro.ordinal)
	   FROM run_roles ro WHERE ro.run_id = r.run_id)`

// headsSQL finds the oldest queued run of every shape by skipping through the index
// runs_queue_by_shape: its cost grows with the number of distinct shapes, not with the depth
// of the queue. Runs of one shape are interchangeable, so when the head of a shape cannot be
// placed, no run behind it can either.
const headsSQL = `
WITH RECURSIVE shapes(shape) AS (
    (SELECT shape FROM runs WHERE state = 'QUEUED' ORDER BY shape LIMIT 1)
    UNION ALL
    SELECT (SELECT r.shape FROM runs r WHERE r.state = 'QUEUED' AND r.shape > s.shape ORDER BY r.shape LIMIT 1)
    FROM shapes s WHERE s.shape IS NOT NULL
)
SELECT h.* FROM shapes s CROSS JOIN LATERAL (
    SELECT ` + headColumns + ` FROM runs r
    WHERE r.state = 'QUEUED' AND r.shape = s.shape ORDER BY r.created_at, r.run_id LIMIT 1
) h
WHERE s.shape IS NOT NULL`

// nextOfShapeSQL is the run behind a head of the same shape.
const nextOfShapeSQL = `
	SELECT ` + headColumns + ` FROM runs r
	WHERE r.state = 'QUEUED' AND r.shape = @shape
	  AND (r.created_at, r.run_id) > (@created_at::timestamptz, @run_id::text)
	ORDER BY r.created_at, r.run_id LIMIT 1`

// promoteSQL is one promotion, in one statement and so one transaction: the conditional
// update (I6), the leases (I1), the roles' node ids, the event. The chosen nodes are re-read
// inside it; if one stopped being available the count falls short and nothing is written,
// and if another transaction leased one first, leases_pkey refuses the statement.
const promoteSQL = `
WITH avail AS (
    SELECT a.role, n.node_id, n.boot_id
    FROM unnest(@roles::text[], @nodes::text[]) AS a(role, node_id)
    JOIN nodes n ON n.node_id = a.node_id
    WHERE n.advert_expires_at > now() AND NOT n.draining
      AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.node_id = n.node_id)
), run AS (
    UPDATE runs SET state = 'RUNNING', started_at = now(),
        deadline_at = now() + timeout_seconds * interval '1 second'
    WHERE run_id = @run_id::text AND state = 'QUEUED' AND width = (SELECT count(*) FROM avail)
    RETURNING run_id, attempt
), roles AS (
    UPDATE run_roles ro SET node_id = a.node_id FROM run, avail a
    WHERE ro.run_id = run.run_id AND ro.role = a.role
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN avail a
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'promoted', 'QUEUED', 'RUNNING' FROM run
)
SELECT count(*) FROM run`

// head is a queued run the wake may place.
type head struct {
	RunID     string
	Shape     string
	CreatedAt time.Time
	Protected bool
	Roles     []match.Role
}

// sweep walks the queue once over the nodes available when it starts. raced reports that a
// promotion lost to another writer, so the caller sweeps again from fresh state.
func (s *Store) sweep(ctx context.Context, res *WakeResult) (raced bool, err error) {
	rows, err := s.pool.Query(ctx, wakeStartSQL)
	if err != nil {
		return false, translate(err)
	}
	avail, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AvailableNode])
	if err != nil || len(avail) == 0 {
		return false, translate(err)
	}
	starvation := pgx.NamedArgs{"starvation": s.set.Starvation.Seconds()}
	rows, err = s.pool.Query(ctx, headsSQL, starvation)
	if err != nil {
		return false, translate(err)
	}
	heads, err := pgx.CollectRows(rows, pgx.RowToStructByPos[head])
	if err != nil {
		return false, translate(err)
	}
	queue := headQueue(heads)
	heap.Init(&queue)
	free := newNodeSet(avail)
	for queue.Len() > 0 && free.size() > 0 {
		h := heap.Pop(&queue).(head)
		res.Walked++
		assigned, unmet := match.Assign(h.Roles, free.nodes())
		if len(unmet) > 0 {
			if h.Protected {
				// No younger run may take a node this run could use: it keeps waiting for
				// the rest, and the narrow runs flow through the other nodes.
				free.removeCapable(h.Roles)
			}
			continue // nothing behind it in this shape can be placed either
		}
		promoted, err := s.promote(ctx, h, assigned)
		switch {
		case Unreachable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return false, err
		case err != nil:
			// One run's failure is that run's: log it and go on with the others.
			raced = raced || errors.Is(err, ErrNodeTaken)
			if !errors.Is(err, ErrNodeTaken) {
				s.log.Error("wake: promotion failed", "run_id", h.RunID, "error", err.Error())
			}
		case !promoted:
			raced = true // the run moved, or a node went, since we looked
		default:
			res.Promoted++
			for _, node := range assigned {
				free.remove(node)
			}
		}
		if free.size() == 0 {
			break
		}
		if next, ok, err := s.nextOfShape(ctx, h, starvation); err != nil {
			return raced, err
		} else if ok {
			heap.Push(&queue, next)
		}
	}
	return raced, nil
}

func (s *Store) promote(ctx context.Context, h head, assigned map[string]string) (bool, error) {
	roles, nodes := make([]string, 0, len(assigned)), make([]string, 0, len(assigned))
	for role, node := range assigned {
		roles, nodes = append(roles, role), append(nodes, node)
	}
	var n int
	err := s.pool.QueryRow(ctx, promoteSQL, pgx.NamedArgs{
		"run_id": h.RunID, "roles": roles, "nodes": nodes, "lease_ttl": s.set.LeaseTTL.Seconds(),
	}).Scan(&n)
	return n == 1, translate(err)
}

func (s *Store) nextOfShape(ctx context.Context, h head, args pgx.NamedArgs) (head, bool, error) {
	rows, err := s.pool.Query(ctx, nextOfShapeSQL, pgx.NamedArgs{
		"starvation": args["starvation"], "shape": h.Shape, "created_at": h.CreatedAt, "run_id": h.RunID,
	})
	if err != nil {
		return head{}, false, translate(err)
	}
	next, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[head])
	if errors.Is(err, pgx.ErrNoRows) {
		return head{}, false, nil
	}
	return next, err == nil, translate(err)
}

// headQueue orders heads by arrival: (created_at, run_id).
type headQueue []head

func (q headQueue) Len() int { return len(q) }
func (q headQueue) Less(i, j int) bool {
	if !q[i].CreatedAt.Equal(q[j].CreatedAt) {
		return q[i].CreatedAt.Before(q[j].CreatedAt)
	}
	return q[i].RunID < q[j].RunID
}
func (q headQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *headQueue) Push(x any)   { *q = append(*q, x.(head)) }
func (q *headQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	*q = old[:len(old)-1]
	return h
}

// nodeSet is the sweep's view of the available nodes: nodes it promoted onto leave it, so the
// sweep never tries to place two runs on one node (the lease PK would refuse the second).
type nodeSet struct{ list []AvailableNode }

func newNodeSet(nodes []AvailableNode) *nodeSet { return &nodeSet{list: nodes} }

func (s *nodeSet) size() int { return len(s.list) }

func (s *nodeSet) nodes() []match.Node {
	out := make([]match.Node, len(s.list))
	for i, n := range s.list {
		out[i] = match.Node{ID: n.NodeID, Labels: n.Labels, Available: true}
	}
	return out
}

func (s *nodeSet) remove(id string) {
	for i, n := range s.list {
		if n.NodeID == id {
			s.list = append(s.list[:i], s.list[i+1:]...)
			return
		}
	}
}

func (s *nodeSet) removeCapable(roles []match.Role) {
	kept := s.list[:0]
	for _, n := range s.list {
		capable := false
		for _, r := range roles {
			if match.Satisfies(n.Labels, r.Needs) {
				capable = true
				break
			}
		}
		if !capable {
			kept = append(kept, n)
		}
	}
	s.list = kept
}

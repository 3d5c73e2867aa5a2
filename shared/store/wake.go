package store

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	// NodesRead is how many available nodes the sweeps read: bounded per need of the queue's
	// heads, however large the idle part of the fleet.
	NodesRead int
	// Placed are the nodes this wake leased, so a caller can hand a node it freed its next
	// run without asking the database whether there is one.
	Placed []string
}

// startNodes bounds the available nodes startSQL reads; perNeed is the least freeByNeedSQL
// then reads per need.
const (
	startNodes = 32
	perNeed    = 64
)

// maxSweeps bounds the fresh re-sweeps after a lost race. A race is only lost to another
// writer that changed the fleet or the queue, and that writer wakes the queue itself after its
// own commit, so a few sweeps are enough to never leave a run next to a free node.
const maxSweeps = 4

// WakeQueued promotes queued runs onto available nodes (SPEC.md §6): in arrival order among
// runs that compete for the same nodes, past runs that cannot be placed (backfill), but never
// onto a node a run older than STARVATION_SECONDS could use. One transaction per promotion,
// each a conditional update, so concurrent wakes are harmless and a failure never undoes an
// earlier promotion. It runs inline, after the caller's commit; it starts no goroutine.
//
// prefer names nodes the caller just freed: among equally good nodes it reads, they are placed
// on first.
func (s *Store) WakeQueued(ctx context.Context, prefer ...string) (WakeResult, error) {
	if s.set.LeaseTTL <= 0 {
		return WakeResult{}, ErrLeaseTTL
	}
	var res WakeResult
	for races := 0; races < maxSweeps; {
		res.Sweeps++
		before := res.Promoted
		end, err := s.sweep(ctx, &res, prefer)
		switch {
		case err != nil:
			return res, err
		case end.partial && res.Promoted > before:
			// It saw part of a large set of free nodes and used some: the rest may serve more.
		case end.raced:
			races++
		default:
			return res, nil
		}
	}
	return res, nil
}

// protected is the starvation rule, for run r: a queued run older than STARVATION_SECONDS
// keeps every node it could use from younger runs.
const protected = `r.created_at < now() - @starvation::float8 * interval '1 second'`

// headColumns describe a queued run as the wake needs it, and whether it is protected.
const headColumns = `r.run_id, r.shape, r.created_at, ` + protected + `,
	(SELECT json_agg(json_build_object('Name', ro.role, 'Needs', ro.needs) ORDER BY ro.ordinal)
	   FROM run_roles ro WHERE ro.run_id = r.run_id)`

// startSQL is all a sweep reads before it places anything, in one round trip: the oldest queued
// run of every shape (the heads), and the available nodes that could serve one of them. It
// answers nothing at all unless both exist, so a wake that can place nothing costs this one
// statement, whatever the depth of the queue or the size of the fleet: the heads come from an
// index, the available nodes from free_nodes, which holds only the nodes no lease holds.
//
// The heads come from skipping through the index runs_queue_by_shape: the cost grows with the
// number of distinct shapes, not with the depth of the queue. (Every "oldest of a shape" here
// orders by shape first, which the equality makes no different, so that the plan walks that
// index: ordered by arrival alone it could walk runs_queue past every run of other shapes.
// The needs are looked up per head, OFFSET 0 keeping it a lookup: as a join, a plan made at
// one depth read all of run_roles at another.) Runs of one shape are
// interchangeable, so when the head of a shape cannot be placed, no run behind it can either;
// and a node no head could use is no use to any queued run. (The wake used to read every
// available node first: with a busy queue for one kind of board, every wake shipped the whole
// idle rest of a lab to Go and matched it for nothing.)
//
// It reads at most startNodes available nodes: while runs queue the fleet is mostly busy, so
// that is all of them; past that, a sweep places what it can on those, and sweeps again (see
// sweep). (Unbounded, a burst of submits onto 2,000 idle boards shipped every idle board to
// Go on every wake, 1,900 rows and 6,000 buffers, and so did every wake while a head waited
// for a busy GPU beside a board.)
var startSQL = `
/* wake: start */
WITH RECURSIVE shapes(shape) AS (
    (SELECT shape FROM runs WHERE state = 'QUEUED' ORDER BY shape LIMIT 1)
    UNION ALL
    SELECT (SELECT r.shape FROM runs r WHERE r.state = 'QUEUED' AND r.shape > s.shape ORDER BY r.shape LIMIT 1)
    FROM shapes s WHERE s.shape IS NOT NULL
), heads AS (
    SELECT h.* FROM shapes s CROSS JOIN LATERAL (
        SELECT ` + headColumns + ` FROM runs r
        WHERE r.state = 'QUEUED' AND r.shape = s.shape ORDER BY r.shape, r.created_at, r.run_id LIMIT 1
    ) h(run_id, shape, created_at, protected, roles)
    WHERE s.shape IS NOT NULL
), needs AS (
    SELECT DISTINCT ro.needs FROM heads h
    CROSS JOIN LATERAL (SELECT needs FROM run_roles ro WHERE ro.run_id = h.run_id OFFSET 0) ro
), free AS (
    SELECT n.node_id, n.labels FROM free_nodes f JOIN nodes n ON n.node_id = f.node_id
    WHERE EXISTS (SELECT 1 FROM heads)
      AND n.advert_expires_at > now() AND NOT n.draining
      AND EXISTS (SELECT 1 FROM needs WHERE n.labels @> needs.needs)
    LIMIT ` + strconv.Itoa(startNodes) + `
)
SELECT true, h.run_id, h.shape, h.created_at, h.protected, h.roles, NULL::text[]
FROM heads h WHERE EXISTS (SELECT 1 FROM free)
UNION ALL
SELECT false, f.node_id, NULL, NULL, NULL, NULL, f.labels FROM free f`

// withStarvation writes the starvation bound into the statements that read heads (headColumns):
// startSQL then takes no parameter. A statement with parameters is planned afresh for its first five runs on each connection, and
// for every run while PostgreSQL judges the generic plan costlier. This one takes about 0.8 ms
// to plan and 0.15 ms to run; some benchmark runs had every wake at 0.9 ms instead of 0.2 (as
// plan_cache_mode=force_custom_plan does). A statement without parameters keeps its one plan.
func withStarvation(sql string, starvation time.Duration) string {
	return strings.ReplaceAll(sql, "@starvation::float8", strconv.FormatFloat(starvation.Seconds(), 'f', -1, 64)+"::float8")
}

// nextOfShapeSQL is the run behind a head of the same shape.
const nextOfShapeSQL = `
	SELECT ` + headColumns + ` FROM runs r
	WHERE r.state = 'QUEUED' AND r.shape = @shape
	  AND (r.created_at, r.run_id) > (@created_at::timestamptz, @run_id::text)
	ORDER BY r.shape, r.created_at, r.run_id LIMIT 1`

// freeByNeedSQL reads up to @k available nodes per need (a need is its labels joined by
// commas). With k at least the heads' widths added up, every head finds its nodes, whatever the
// heads before it took: a role with k candidates keeps one free (Hall's condition). The nodes
// are found by their labels (nodes_labels) and then checked free, each need's labels split
// once (OFFSET 0), not once per node.
const freeByNeedSQL = `
/* wake: free nodes by need */
SELECT DISTINCT c.node_id, c.labels
FROM unnest(@needs::text[]) AS nd(need)
CROSS JOIN LATERAL (SELECT string_to_array(nd.need, ',') AS labels OFFSET 0) want
CROSS JOIN LATERAL (
    SELECT n.node_id, n.labels FROM nodes n
    WHERE n.labels @> want.labels AND n.advert_expires_at > now() AND NOT n.draining
      AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id)
    LIMIT @k) c`

// takeFreeNodes follows a list a of chosen nodes (column node_id; @nodes lists them again, so
// the plan looks them up and never scans the fleet) and holds those still free and live, by
// their free_nodes rows, skipping any another writer is taking: see promoteSQL for why those
// rows. A submit's placement and a promotion both take nodes through it.
const takeFreeNodes = `
    JOIN free_nodes f ON f.node_id = a.node_id
    JOIN nodes n ON n.node_id = f.node_id
    WHERE f.node_id = ANY (@nodes::text[]) AND n.node_id = ANY (@nodes::text[])
      AND n.advert_expires_at > now() AND NOT n.draining
    FOR UPDATE OF f SKIP LOCKED`

// promoteSQL is one promotion, in one statement and so one transaction: the conditional
// update (I6), the leases (I1), the roles' node ids, the event.
//
// It locks the planned nodes' free_nodes rows first, and only then a run: the oldest queued run of the head's
// shape, from the head on, that no one else holds (runs of one shape are interchangeable for
// placement, so the planned nodes are paired with the picked run's roles by their needs, byte
// order on both sides, not by role name). Only a writer taking the node as a lease holds its
// free_nodes row, and a lease taken since this statement's snapshot has deleted it: so a node
// leased meanwhile, or being leased right now by another promotion or a submit, makes the
// count fall short before any run is touched; the statement writes nothing and says so, and
// the wake tries the head on other nodes. (Locking the nodes row instead let a node leased
// since the snapshot look free until leases_pkey refused the insert, after the run was held;
// and a heartbeat renewing its advert held that row and hid an idle node from every wake.)
//
// Every handler that frees a node wakes the queue, so wakes meet at the head. They used to
// lock the run first and wait for it: each wake queued behind the one before, found the head
// gone and its node taken, and swept again — five promotion attempts per promotion, each
// waiting out the one before it. A wake that finds the head held now skips to the run behind
// it. That keeps arrival order because the holder already holds its nodes: from there its
// promotion cannot fail for want of a node. (Skipping while the nodes were still to be locked
// let a younger run overtake a head whose promotion then failed.)
const promoteSQL = `
/* wake: promote */
WITH slot AS (
    SELECT a.ord, a.need, n.node_id, n.boot_id
    FROM unnest(@needs::text[], @nodes::text[]) WITH ORDINALITY AS a(need, node_id, ord)` + takeFreeNodes + `
), pick AS (
    SELECT run_id, width FROM runs
    WHERE state = 'QUEUED' AND shape = @shape::text
      AND (created_at, run_id) >= (@created_at::timestamptz, @run_id::text)
      AND (SELECT count(*) FROM slot) = cardinality(@nodes::text[]) -- the nodes first
    ORDER BY shape, created_at, run_id LIMIT 1
    FOR UPDATE SKIP LOCKED
), role AS (
    SELECT ro.role, array_to_string(ro.needs, ',') AS need,
           row_number() OVER (ORDER BY array_to_string(ro.needs, ',') COLLATE "C", ro.role COLLATE "C") AS ord
    FROM run_roles ro WHERE ro.run_id = (SELECT run_id FROM pick)
), assign AS (
    SELECT r.role, s.node_id, s.boot_id FROM role r JOIN slot s ON s.ord = r.ord AND s.need = r.need
), run AS (
    UPDATE runs r SET state = 'RUNNING', started_at = now(),
        deadline_at = now() + r.timeout_seconds * interval '1 second'
    FROM pick WHERE r.run_id = pick.run_id AND r.state = 'QUEUED' AND pick.width = (SELECT count(*) FROM assign)
    RETURNING r.run_id, r.attempt, r.created_at
), roles AS (
    UPDATE run_roles ro SET node_id = a.node_id FROM run, assign a
    WHERE ro.run_id = run.run_id AND ro.role = a.role
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN assign a
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state)
    SELECT run_id, attempt, 'promoted', 'QUEUED', 'RUNNING' FROM run
)
SELECT (SELECT coalesce(array_agg(node_id), '{}') FROM slot), run.run_id, run.created_at
FROM (SELECT 1) one LEFT JOIN run ON true`

// head is a queued run the wake may place.
type head struct {
	RunID     string
	Shape     string
	CreatedAt time.Time
	Protected bool
	Roles     []match.Role
}

// sweepEnd says why a sweep may leave work for another: raced, a promotion lost to another
// writer; partial, the sweep saw only part of the available nodes; unmet, some head found no
// nodes among those it saw.
type sweepEnd struct{ raced, partial, unmet bool }

// sweep walks the queue once over the nodes available when it starts; the caller sweeps again
// from fresh state when the end says so. When it saw only startNodes of the available nodes,
// placed nothing, and a head found no nodes among them, it reads the nodes per need of the
// heads and walks again: a head needing a rare label must not wait behind a crowd of others.
func (s *Store) sweep(ctx context.Context, res *WakeResult, prefer []string) (sweepEnd, error) {
	heads, avail, err := s.start(ctx)
	res.NodesRead += len(avail)
	if err != nil || len(avail) == 0 {
		return sweepEnd{}, err
	}
	before := res.Promoted
	end, err := s.walk(ctx, res, heads, &nodeSet{list: avail, prefer: prefer})
	end.partial = len(avail) == startNodes
	if err != nil || !end.partial || !end.unmet || res.Promoted > before {
		return end, err
	}
	avail, partial, err := s.freeByNeed(ctx, heads)
	res.NodesRead += len(avail)
	if err != nil {
		return end, err
	}
	end, err = s.walk(ctx, res, heads, &nodeSet{list: avail, prefer: prefer})
	end.partial = partial
	return end, err
}

// walk places the heads, in arrival order, and the runs behind them, on the free nodes.
func (s *Store) walk(ctx context.Context, res *WakeResult, heads []head, free *nodeSet) (end sweepEnd, err error) {
	queue := headQueue(slices.Clone(heads))
	heap.Init(&queue)
	for queue.Len() > 0 && free.size() > 0 {
		h := heap.Pop(&queue).(head)
		res.Walked++
		assigned, unmet := match.Assign(h.Roles, free.nodes(), h.RunID)
		if len(unmet) > 0 {
			end.unmet = true
			if h.Protected {
				// No younger run may take a node this run could use: it keeps waiting for
				// the rest, and the narrow runs flow through the other nodes.
				free.removeCapable(h.Roles)
			}
			continue // nothing behind it in this shape can be placed either
		}
		placed, outcome, err := s.promote(ctx, h, assigned)
		switch {
		case errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return end, err
		case outcome == nodesTaken, outcome == nodesChanged:
			// Another wake or a submit is taking a planned node (and will use it), or it went:
			// the same head, on the nodes left.
			for _, node := range assigned {
				if !slices.Contains(placed.had, node) {
					free.remove(node)
				}
			}
			heap.Push(&queue, h)
			// A node changed under the promotion (it restarted, or a lease slipped in) and was
			// refused at COMMIT: no one else is sure to use it, so a fresh sweep looks again.
			end.raced = end.raced || outcome == nodesChanged
			continue
		case err != nil || outcome == runsTaken:
			// Every run of the shape from the head on is promoted or held by another writer,
			// or this promotion failed (logged; the walk goes on with the other shapes).
			// Nothing more of this shape in this sweep; a fresh sweep looks again.
			end.raced = true
			if err != nil {
				s.log.Error("wake: promotion failed", "run_id", h.RunID, "error", err.Error())
			}
			continue
		}
		res.Promoted++
		h = placed.head // go on behind the run actually placed
		for _, node := range assigned {
			free.remove(node)
			res.Placed = append(res.Placed, node)
		}
		if free.size() == 0 {
			break
		}
		if next, ok, err := s.nextOfShape(ctx, h); err != nil {
			return end, err
		} else if ok {
			heap.Push(&queue, next)
		}
	}
	return end, nil
}

// start reads the heads and the available nodes that could serve them (startSQL).
func (s *Store) start(ctx context.Context) (heads []head, avail []AvailableNode, err error) {
	rows, err := s.pool.Query(ctx, s.startSQL)
	if err != nil {
		return nil, nil, translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			isHead    bool
			id        string
			shape     *string
			createdAt *time.Time
			protected *bool
			roles     []match.Role
			labels    []string
		)
		if err := rows.Scan(&isHead, &id, &shape, &createdAt, &protected, &roles, &labels); err != nil {
			return nil, nil, translate(err)
		}
		if isHead {
			heads = append(heads, head{RunID: id, Shape: *shape, CreatedAt: *createdAt, Protected: *protected, Roles: roles})
		} else {
			avail = append(avail, AvailableNode{NodeID: id, Labels: labels})
		}
	}
	return heads, avail, translate(rows.Err())
}

// freeByNeed reads the available nodes per need of the heads (freeByNeedSQL). partial: some
// need may have more capable nodes than were read.
func (s *Store) freeByNeed(ctx context.Context, heads []head) (avail []AvailableNode, partial bool, err error) {
	var needs [][]string
	k := 0
	for _, h := range heads {
		k += len(h.Roles)
		for _, r := range h.Roles {
			if !slices.ContainsFunc(needs, func(n []string) bool { return slices.Equal(n, r.Needs) }) {
				needs = append(needs, r.Needs)
			}
		}
	}
	k = max(k, perNeed)
	joined := make([]string, len(needs))
	for i, n := range needs {
		joined[i] = strings.Join(n, ",")
	}
	rows, err := s.pool.Query(ctx, freeByNeedSQL, named{"needs": joined, "k": k})
	if err != nil {
		return nil, false, translate(err)
	}
	avail, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AvailableNode])
	for _, n := range needs {
		capable := 0
		for _, a := range avail {
			if match.Satisfies(a.Labels, n) {
				capable++
			}
		}
		partial = partial || capable >= k
	}
	return avail, partial, translate(err)
}

// promoteOutcome is what became of one promotion.
type promoteOutcome int

const (
	promoted     promoteOutcome = iota
	nodesTaken                  // a planned node is held by another writer, or gone: nothing written
	nodesChanged                // a constraint refused a planned node at COMMIT: nothing written
	runsTaken                   // the nodes were had, but no run of the shape from the head on
)

// promote places the oldest free run of h's shape, from h on, on the nodes planned for h's
// roles. It returns the run it placed (h, or one behind it), or the planned nodes it could
// hold when they were not all free, and what became of it.
func (s *Store) promote(ctx context.Context, h head, assigned map[string]string) (promotion, promoteOutcome, error) {
	type slot struct{ need, role, node string }
	slots := make([]slot, 0, len(assigned))
	for _, r := range h.Roles {
		slots = append(slots, slot{strings.Join(r.Needs, ","), r.Name, assigned[r.Name]})
	}
	// The same order the statement numbers the picked run's roles in: needs, then name, bytes.
	sort.Slice(slots, func(i, j int) bool {
		if slots[i].need != slots[j].need {
			return slots[i].need < slots[j].need
		}
		return slots[i].role < slots[j].role
	})
	needs, nodes := make([]string, len(slots)), make([]string, len(slots))
	for i, sl := range slots {
		needs[i], nodes[i] = sl.need, sl.node
	}
	var (
		had       []string
		runID     *string
		createdAt *time.Time
	)
	err := s.pool.QueryRow(ctx, promoteSQL, named{
		"shape": h.Shape, "created_at": h.CreatedAt, "run_id": h.RunID,
		"needs": needs, "nodes": nodes, "lease_ttl": s.set.LeaseTTL.Seconds(),
	}).Scan(&had, &runID, &createdAt)
	switch {
	case errors.Is(translate(err), ErrNodeTaken):
		return promotion{head: h}, nodesChanged, nil
	case err != nil:
		return promotion{head: h}, runsTaken, translate(err)
	case len(had) < len(nodes):
		return promotion{head: h, had: had}, nodesTaken, nil
	case runID == nil:
		return promotion{head: h}, runsTaken, nil
	}
	placed := h
	placed.RunID, placed.CreatedAt = *runID, *createdAt
	return promotion{head: placed}, promoted, nil
}

// promotion is the run a promotion placed (or meant to), and the planned nodes it held.
type promotion struct {
	head
	had []string
}

func (s *Store) nextOfShape(ctx context.Context, h head) (head, bool, error) {
	rows, err := s.pool.Query(ctx, s.nextOfShapeSQL, named{
		"shape": h.Shape, "created_at": h.CreatedAt, "run_id": h.RunID,
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
type nodeSet struct {
	list   []AvailableNode
	prefer []string
}

func (s *nodeSet) size() int { return len(s.list) }

func (s *nodeSet) nodes() []match.Node {
	out := make([]match.Node, len(s.list))
	for i, n := range s.list {
		out[i] = match.Node{ID: n.NodeID, Labels: n.Labels, Available: true, Preferred: slices.Contains(s.prefer, n.NodeID)}
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

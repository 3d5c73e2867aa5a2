package store

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
	"mediator/shared/wire"
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
	// Placed are the nodes this wake leased.
	Placed []string
	// Runs are the runs it promoted (their events are the caller's to publish).
	Runs []string
	// HandedOver is the work of WakeParams.HandOver's node when the wake placed a run on it.
	HandedOver *NodeWork
}

// NodeWork is a node's lease and the steps it gives.
type NodeWork struct {
	Lease HeldLease
	Steps []NodeStep
}

// startNodes bounds the available nodes wake_start reads; perNeed is the least wake_free_by_need
// then reads per need.
const (
	startNodes = 32
	perNeed    = 64
)

// maxSweeps bounds the fresh re-sweeps after a lost race. A race is only lost to another
// writer that changed the fleet or the queue, and that writer wakes the queue itself after its
// own commit, so a few sweeps are enough to never leave a run next to a free node.
const maxSweeps = 4

// maxWakeSweeps bounds all of one wake's sweeps. In a large idle fleet a wake sweeps again as
// long as it places runs, and under a steady stream of arrivals that never ends by itself: the
// handler would answer only when the stream paused. What it leaves is the next wake's — every
// submit that queues a run wakes after its commit.
const maxWakeSweeps = 8

// WakeParams is what the caller of a wake knows about the nodes it just freed.
type WakeParams struct {
	// Prefer: among equally good nodes the wake reads, these are placed on first.
	Prefer []string
	// Held: nodes the caller's report freed and held for this wake (ReportResult.Held). Only
	// this wake places on them; those it does not place on it lets go and sweeps again.
	Held []string
	// HandOver is a node whose agent waits for the caller's answer (a report's), under its
	// boot: a promotion onto it reads the node's work in its own transaction, so the answer
	// hands the node its next run without another query.
	HandOver *NodeAtBoot
	// Read is the queue as the caller's report read it inside its own transaction, after it
	// held the node it freed (ReportResult.Read): the first sweep starts from it.
	Read *QueueRead
}

// NodeAtBoot is a node under one boot.
type NodeAtBoot struct{ NodeID, BootID string }

// holdFor is how long a report holds the nodes it frees for its own wake: longer than a
// request's deadline, so a hold outlives its wake only when the wake's Lambda died, and then
// it delays the node by no more than this.
const holdFor = 10 * time.Second

// WakeQueued promotes queued runs onto available nodes: in queue order among
// runs that compete for the same nodes, past runs that cannot be placed (backfill), but never
// onto a node a run older than STARVATION_SECONDS could use. One transaction per promotion,
// each a conditional update, so concurrent wakes are harmless and a failure never undoes an
// earlier promotion. It runs inline, after the caller's commit; it starts no goroutine.
func (s *Store) WakeQueued(ctx context.Context, p WakeParams) (WakeResult, error) {
	if s.set.LeaseTTL <= 0 {
		return WakeResult{}, ErrLeaseTTL
	}
	w := &waking{WakeParams: p, seed: strconv.FormatUint(rand.Uint64(), 36) + "/"}
	w.Prefer = append(slices.Clone(p.Held), p.Prefer...)
	err := s.sweeps(ctx, w)
	rest := slices.DeleteFunc(slices.Clone(p.Held), func(n string) bool { return slices.Contains(w.res.Placed, n) })
	if len(rest) == 0 || ctx.Err() != nil {
		return w.res, err
	}
	// A held node this wake did not place on is let go, and the queue swept again from a
	// snapshot that sees it free: a run that queued while it was held skipped it, and its
	// submit's wake has come and gone.
	tag, letGoErr := wakeLetGo.exec(ctx, s.pool, named{"held": rest})
	if err != nil || letGoErr != nil || tag.RowsAffected() == 0 {
		return w.res, errors.Join(err, letGoErr)
	}
	w.Held = nil
	return w.res, s.sweeps(ctx, w)
}

// waking is one wake: what its caller said, its own seed, and what it did so far.
type waking struct {
	WakeParams
	// seed is the wake's own: concurrent wakes read the same free nodes and meet at the same
	// head, and with the head's id alone as the seed every one of them planned the same node,
	// all but one lost it, and they walked down the list in step, a lost transaction per node.
	seed string
	res  WakeResult
}

// sweeps sweeps until a sweep leaves nothing for another, within the bounds.
func (s *Store) sweeps(ctx context.Context, w *waking) error {
	for races, sweeps := 0, 0; races < maxSweeps && sweeps < maxWakeSweeps; sweeps++ {
		w.res.Sweeps++
		before := w.res.Promoted
		end, err := s.sweep(ctx, w)
		switch {
		case err != nil:
			return err
		case end.partial && w.res.Promoted > before:
			// It saw part of a large set of free nodes and used some: the rest may serve more.
		case end.raced:
			races++
		default:
			return nil
		}
	}
	return nil
}

var (
	wakeStart       = stmt("wake_start")
	wakeNextOfShape = stmt("wake_next_of_shape")
	wakeFreeByNeed  = stmt("wake_free_by_need")
	wakePromote     = stmt("wake_promote")
	wakeLetGo       = stmt("wake_let_go")
	reportWakeStart = stmt("report_wake_start")
	// wakePromoteProtected reads the starvation bound: Store.New writes it in.
	wakePromoteProtected = stmt("wake_promote_protected")
)

// starvationParam is where protected (sql/rules.sql) reads the starvation bound, heldParam
// where wake_may_use reads the nodes held for the wake.
const (
	starvationParam = "@starvation::float8"
	heldParam       = "@held::text[]"
)

// withStarvation writes this store's starvation bound into a statement that reads heads, so
// that it takes no parameter: a statement with parameters is planned afresh for its first
// five runs on each connection, and for every run while PostgreSQL judges the generic plan
// costlier, and the wake's start costs more to plan than to run. A statement without
// parameters keeps its one plan.
func withStarvation(st statement, starvation time.Duration) statement {
	return withLiteral(st, starvationParam, strconv.FormatFloat(starvation.Seconds(), 'f', -1, 64)+"::float8")
}

// withNoneHeld is wake_start for a wake that holds no node, which is most of them: without
// the parameter, it keeps its one plan too.
func withNoneHeld(st statement) statement { return withLiteral(st, heldParam, "'{}'::text[]") }

// withLiteral writes literal in place of param. It panics on a statement without the
// placeholder: that is a wiring mistake, and New runs at start-up.
func withLiteral(st statement, param, literal string) statement {
	if !strings.Contains(st.sql, param) {
		panic("store: " + st.name + " does not read " + param)
	}
	st.sql = strings.ReplaceAll(st.sql, param, literal)
	return st
}

// head is a queued run the wake may place.
type head struct {
	RunID     string
	Shape     string
	CreatedAt time.Time
	QueueRank int // 100 - priority: the queue orders by it first
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
func (s *Store) sweep(ctx context.Context, w *waking) (sweepEnd, error) {
	read, err := QueueRead{}, error(nil)
	if w.Read != nil {
		read, w.Read = *w.Read, nil
	} else {
		read, err = s.start(ctx, w.Held)
	}
	heads, avail := read.heads, read.avail
	w.res.NodesRead += len(avail)
	if err != nil || len(avail) == 0 {
		return sweepEnd{}, err
	}
	before := w.res.Promoted
	end, err := s.walk(ctx, w, heads, &nodeSet{list: avail, prefer: w.Prefer})
	end.partial = len(avail) == startNodes
	if err != nil || !end.partial || !end.unmet || w.res.Promoted > before {
		return end, err
	}
	avail, partial, err := s.freeByNeed(ctx, heads, w.Held)
	w.res.NodesRead += len(avail)
	if err != nil {
		return end, err
	}
	end, err = s.walk(ctx, w, heads, &nodeSet{list: avail, prefer: w.Prefer})
	end.partial = partial
	return end, err
}

// walk places the heads, in arrival order, and the runs behind them, on the free nodes.
func (s *Store) walk(ctx context.Context, w *waking, heads []head, free *nodeSet) (end sweepEnd, err error) {
	res := &w.res
	queue := headQueue(slices.Clone(heads))
	heap.Init(&queue)
	for queue.Len() > 0 && free.size() > 0 {
		h := heap.Pop(&queue).(head)
		res.Walked++
		assigned, unmet := match.Assign(h.Roles, free.nodes(), w.seed+h.RunID)
		if len(unmet) > 0 {
			end.unmet = true
			if h.Protected {
				// No younger run may take a node this run could use: it keeps waiting for
				// the rest, and the narrow runs flow through the other nodes.
				free.removeCapable(h.Roles)
			}
			continue // nothing behind it in this shape can be placed either
		}
		placed, outcome, err := s.promote(ctx, w, h, assigned)
		switch {
		case errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return end, err
		case outcome == nodesTaken, outcome == nodesChanged:
			// Another wake or a submit is taking a planned node (and will use it), a restart is
			// changing it (and wakes after its commit), or it went: the same head, on the nodes
			// left.
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
		case err != nil:
			// This promotion failed (logged; the walk goes on with the other shapes): a
			// fresh sweep looks again.
			end.raced = true
			s.log.Error("wake: promotion failed", "run_id", h.RunID, "error", err.Error())
			continue
		case outcome == runsTaken:
			// Every run of the shape from the head on is promoted, or held by another writer
			// that will place it, end it, or (a priority change) wake after its commit:
			// nothing more of this shape, and nothing to look at again for it.
			continue
		}
		res.Promoted++
		h = placed.head // go on behind the run actually placed
		res.Runs = append(res.Runs, h.RunID)
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

// QueueRead is what wake_start read: the heads, how many runs of each head's shape are queued
// (up to one more than the nodes it reads), and available nodes that could serve them.
type QueueRead struct {
	heads   []head
	waiting map[string]int
	avail   []AvailableNode
}

// start reads the heads and the available nodes that could serve them (wake_start).
func (s *Store) start(ctx context.Context, held []string) (QueueRead, error) {
	start, args := s.wakeStart, []any{}
	if len(held) > 0 {
		start, args = s.wakeStartHolding, []any{named{"held": held}}
	}
	rows, err := start.query(ctx, s.pool, args...)
	if err != nil {
		return QueueRead{}, err
	}
	var r QueueRead
	return r, r.scan(start, rows)
}

func (r *QueueRead) scan(start statement, rows pgx.Rows) error {
	defer rows.Close()
	for rows.Next() {
		var (
			isHead    bool
			id        string
			shape     *string
			createdAt *time.Time
			rank      *int
			protected *bool
			roles     []match.Role
			labels    []string
			waiting   *int
		)
		if err := rows.Scan(&isHead, &id, &shape, &createdAt, &rank, &protected, &roles, &labels, &waiting); err != nil {
			return start.fail(err)
		}
		if isHead {
			r.heads = append(r.heads, head{RunID: id, Shape: *shape, CreatedAt: *createdAt, QueueRank: *rank, Protected: *protected, Roles: roles})
			if r.waiting == nil {
				r.waiting = map[string]int{}
			}
			r.waiting[*shape] = *waiting
		} else {
			r.avail = append(r.avail, AvailableNode{NodeID: id, Labels: labels})
		}
	}
	return start.fail(rows.Err())
}

// leaves says whether the queue, as read, leaves room for a run submitted behind it, and
// where (and what is left): a wake walking the queue now places every queued run it can — each head's shape as
// many times as it has runs queued — in queue order, on the nodes read and the new run's own
// available candidates, and the new run is placed on what that leaves, or not at all (nil).
// Every queued run counts as ahead of it, whatever the priorities: the read does not say which
// are, and assuming all of them takes nothing from anyone.
//
// The queued runs take the nodes the queue's read found first, and the new run its own
// candidates first: those come from a walk of its own (submit_candidates), so concurrent
// submits reach for different nodes instead of colliding on the ones every read finds first.
func (r QueueRead) leaves(run wire.NewRun, candidates []match.Node, maxWidth int) (map[string]string, []match.Node) {
	free := &nodeSet{list: slices.Clone(r.avail)}
	var own []string
	for _, a := range r.avail {
		free.prefer = append(free.prefer, a.NodeID)
	}
	for _, c := range candidates {
		if !c.Available {
			continue
		}
		own = append(own, c.ID)
		if !slices.ContainsFunc(free.list, func(a AvailableNode) bool { return a.NodeID == c.ID }) {
			free.list = append(free.list, AvailableNode{NodeID: c.ID, Labels: c.Labels})
		}
	}
	queue := headQueue(slices.Clone(r.heads))
	heap.Init(&queue)
	for queue.Len() > 0 && free.size() > 0 {
		h := heap.Pop(&queue).(head)
		for range r.waiting[h.Shape] {
			assigned, unmet := match.Assign(h.Roles, free.nodes(), h.RunID)
			if len(unmet) > 0 {
				if h.Protected {
					free.removeCapable(h.Roles)
				}
				break
			}
			for _, node := range assigned {
				free.remove(node)
			}
		}
	}
	free.prefer = own
	left := free.nodes()
	slices.SortStableFunc(left, func(a, b match.Node) int { // its own candidates first, as spares
		return cmpBool(b.Preferred, a.Preferred)
	})
	if res := match.Place(matchRoles(run.Roles), left, maxWidth, run.RunID); res.Verdict == match.Placeable {
		return res.Assigned, left
	}
	return nil, left
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// freeByNeed reads the available nodes per need of the heads (wake_free_by_need). partial: some
// need may have more capable nodes than were read.
func (s *Store) freeByNeed(ctx context.Context, heads []head, held []string) (avail []AvailableNode, partial bool, err error) {
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
	keys := make([]string, len(needs))
	for i, n := range needs {
		keys[i] = needKey(n)
	}
	avail, err = collect(ctx, s.pool, wakeFreeByNeed, pgx.RowToStructByPos[AvailableNode], named{"needs": keys, "k": k, "held": nonNil(held)})
	for _, n := range needs {
		capable := 0
		for _, a := range avail {
			if match.Satisfies(a.Labels, n) {
				capable++
			}
		}
		partial = partial || capable >= k
	}
	return avail, partial, err
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
// hold when they were not all free, and what became of it. A promotion onto the wake's
// hand-over node reads that node's work in the same transaction (w.res.HandedOver).
func (s *Store) promote(ctx context.Context, w *waking, h head, assigned map[string]string) (promotion, promoteOutcome, error) {
	slots := roleSlots(h.Roles, assigned)
	needs, nodes := make([]string, len(slots)), make([]string, len(slots))
	for i, sl := range slots {
		needs[i], nodes[i] = sl.need, sl.node
	}
	var (
		had       []string
		runID     *string
		createdAt *time.Time
		rank      *int
	)
	promote := wakePromote
	if h.Protected {
		promote = s.wakePromoteProtected
	}
	args := named{
		"head_shape": h.Shape, "head_created_at": h.CreatedAt, "head_run_id": h.RunID, "head_queue_rank": h.QueueRank,
		"needs": needs, "nodes": nodes, "lease_ttl": s.set.LeaseTTL.Seconds(),
	}
	scan := func(row pgx.Row) error { return row.Scan(&had, &runID, &createdAt, &rank) }
	var err error
	if to := w.HandOver; to != nil && slices.Contains(nodes, to.NodeID) {
		var work *NodeWork
		work, err = pipelinedTx(ctx, s, func() pipelined[*NodeWork] {
			var work NodeWork
			found := false
			return pipelined[*NodeWork]{
				write: func(b *pgx.Batch) error {
					promote.queue(b, scan, args)
					nodeWorkStmt.queue(b, func(row pgx.Row) error {
						err := row.Scan(&work.Lease.RunID, &work.Lease.Epoch, &work.Lease.ExpiresAt, &work.Steps)
						found = err == nil
						if errors.Is(err, pgx.ErrNoRows) {
							return nil // the promotion took other nodes, or none
						}
						return err
					}, to.NodeID, to.BootID)
					return nil
				},
				result: func() *NodeWork {
					if !found {
						return nil
					}
					return &work
				},
			}
		})
		if work != nil && runID != nil {
			w.res.HandedOver = work
		}
	} else {
		err = promote.queryRow(ctx, s.pool, args).Scan(&had, &runID, &createdAt, &rank)
	}
	switch {
	case errors.Is(err, ErrNodeTaken):
		return promotion{head: h}, nodesChanged, nil
	case err != nil:
		return promotion{head: h}, runsTaken, err
	case len(had) < len(nodes):
		return promotion{head: h, had: had}, nodesTaken, nil
	case runID == nil:
		return promotion{head: h}, runsTaken, nil
	}
	placed := h
	placed.RunID, placed.CreatedAt, placed.QueueRank = *runID, *createdAt, *rank
	return promotion{head: placed}, promoted, nil
}

// roleSlot is one role of a head with the node planned for it.
type roleSlot struct{ need, role, node string }

// roleSlots are a head's roles in the order wake_promote numbers the picked run's roles in:
// need key, then role name, both as bytes (COLLATE "C" there;
// TestRoleSlotOrderInGoIsTheOrderInSQL). Runs of one shape have the same need keys, so the
// planned nodes go to the picked run's roles of the same needs.
func roleSlots(roles []match.Role, assigned map[string]string) []roleSlot {
	slots := make([]roleSlot, 0, len(roles))
	for _, r := range roles {
		slots = append(slots, roleSlot{needKey(r.Needs), r.Name, assigned[r.Name]})
	}
	sort.Slice(slots, func(i, j int) bool {
		if slots[i].need != slots[j].need {
			return slots[i].need < slots[j].need
		}
		return slots[i].role < slots[j].role
	})
	return slots
}

// promotion is the run a promotion placed (or meant to), and the planned nodes it held.
type promotion struct {
	head
	had []string
}

func (s *Store) nextOfShape(ctx context.Context, h head) (head, bool, error) {
	rows, err := s.wakeNextOfShape.query(ctx, s.pool, named{"head_shape": h.Shape})
	if err != nil {
		return head{}, false, err
	}
	next, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[head])
	if errors.Is(err, pgx.ErrNoRows) {
		return head{}, false, nil
	}
	return next, err == nil, s.wakeNextOfShape.fail(err)
}

// before says whether the wake takes h before o: protected runs first, in arrival order among
// themselves, then queue order — the Go twin of sql/rules.sql's protected, arrival and
// queue_order (TestQueueOrderInGoIsTheQueueOrderInSQL). run_id compares as bytes, as the
// database's C collation does (make dev's and the tests'); under another collation only runs
// of different shapes created in the same microsecond could be walked in another order than
// queue_position counts them, which is no promise either way.
func (h head) before(o head) bool {
	switch {
	case h.Protected != o.Protected:
		return h.Protected
	case !h.Protected && h.QueueRank != o.QueueRank:
		return h.QueueRank < o.QueueRank
	case !h.CreatedAt.Equal(o.CreatedAt):
		return h.CreatedAt.Before(o.CreatedAt)
	}
	return h.RunID < o.RunID
}

// needKey is a role's needs as one string: the Go twin of sql/rules.sql's need_key.
func needKey(needs []string) string { return strings.Join(needs, ",") }

// headQueue orders heads in queue order.
type headQueue []head

func (q headQueue) Len() int           { return len(q) }
func (q headQueue) Less(i, j int) bool { return q[i].before(q[j]) }
func (q headQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *headQueue) Push(x any)        { *q = append(*q, x.(head)) }
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

// nonNil is list, or an empty list for none: ANY (NULL) would match nothing by another path.
func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

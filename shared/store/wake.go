package store

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/wire"
)

// WakeResult says what one WakeQueued did.
type WakeResult struct {
	Promoted int
	// Promotions are the runs it promoted and where, for a caller that answers with one.
	Promotions []Promotion
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

// Promotion is a run a wake promoted: when it started, and each role's node.
type Promotion struct {
	RunID     string
	StartedAt time.Time
	Assigned  map[string]string
}

// Promotion says whether the wake promoted runID, and how.
func (r WakeResult) Promotion(runID string) (Promotion, bool) {
	for _, p := range r.Promotions {
		if p.RunID == runID {
			return p, true
		}
	}
	return Promotion{}, false
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

// maxSweepsAfterLostRaces bounds the fresh sweeps a wake makes after a promotion lost a race a
// fresh look may win (plan.Walked.LookAgain). A race is only lost to another writer that
// changed the fleet or the queue, and that writer wakes the queue itself after its own commit,
// so a few sweeps are enough to never leave a run next to a free node.
const maxSweepsAfterLostRaces = 4

// maxSweepsPerWake bounds all of one wake's sweeps. In a large idle fleet a wake sweeps again
// as long as it places runs, and under a steady stream of arrivals that never ends by itself:
// the handler would answer only when the stream paused. What it leaves is the next wake's —
// every submit that queues a run wakes after its commit.
const maxSweepsPerWake = 8

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
	// Read is the queue as the caller read it inside its own transaction (ReportResult.Read,
	// SubmitResult.Read): the first sweep starts from it instead of reading again.
	Read *QueueRead
	// Submitted is the run the caller's submit just queued, which Read predates: the first
	// sweep walks Read with the run in it, and when that does not place the run the wake reads
	// afresh — a node freed after the submit's read by a writer whose own wake ran before the
	// submit's commit is seen by no one else.
	Submitted *plan.Head
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
	if p.Submitted != nil && p.Read != nil {
		read := p.Read.with(*p.Submitted)
		w.Read = &read
	}
	err := s.sweeps(ctx, w)
	if sub := p.Submitted; err == nil && sub != nil && p.Read != nil && ctx.Err() == nil {
		if _, placed := w.res.Promotion(sub.RunID); !placed {
			err = s.sweeps(ctx, w) // from a fresh read: see WakeParams.Submitted
		}
	}
	rest := slices.DeleteFunc(slices.Clone(p.Held), func(n string) bool { return slices.Contains(w.res.Placed, n) })
	if len(rest) == 0 || ctx.Err() != nil {
		return w.res, err
	}
	// A held node this wake did not place on is let go, and the queue swept again from a
	// snapshot that sees it free: a run that queued while it was held skipped it, and its
	// submit's wake has come and gone.
	tag, letGoErr := wakeLetGoStmt.exec(ctx, s.pool, named{"held": rest})
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
	// head; with one seed they would all plan the same node, all but one lose it, and walk down
	// the list in step, a lost transaction per node.
	seed string
	res  WakeResult
}

// sweeps sweeps until a sweep leaves nothing for another, within the bounds.
func (s *Store) sweeps(ctx context.Context, w *waking) error {
	for lost, sweeps := 0, 0; lost < maxSweepsAfterLostRaces && sweeps < maxSweepsPerWake; sweeps++ {
		w.res.Sweeps++
		before := w.res.Promoted
		end, err := s.sweep(ctx, w)
		switch {
		case err != nil:
			return err
		case end.partial && w.res.Promoted > before:
			// It saw part of a large set of free nodes and used some: the rest may serve more.
		case end.lookAgain:
			lost++
		default:
			return nil
		}
	}
	return nil
}

var (
	wakeStartStmt       = stmt("wake_start")
	wakeNextOfShapeStmt = stmt("wake_next_of_shape")
	wakeFreeByNeedStmt  = stmt("wake_free_by_need")
	wakePromoteStmt     = stmt("wake_promote")
	wakeLetGoStmt       = stmt("wake_let_go")
	reportWakeStartStmt = stmt("report_wake_start")
	// wakePromoteProtected reads the starvation bound: Store.New writes it in.
	wakePromoteProtectedStmt = stmt("wake_promote_protected")
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

// sweepEnd says why a sweep may leave work for another: lookAgain, a promotion lost a race a
// fresh look may win; partial, the sweep saw only part of the available nodes; unmet, some
// head found no nodes among those it saw.
type sweepEnd struct{ lookAgain, partial, unmet bool }

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
	w.res.NodesRead += len(read.avail)
	if err != nil || len(read.avail) == 0 {
		return sweepEnd{}, err
	}
	before := w.res.Promoted
	end, err := s.walk(ctx, w, read, read.avail)
	end.partial = len(read.avail) == startNodes
	if err != nil || !end.partial || !end.unmet || w.res.Promoted > before {
		return end, err
	}
	avail, partial, err := s.freeByNeed(ctx, read.heads, w.Held)
	w.res.NodesRead += len(avail)
	if err != nil {
		return end, err
	}
	end, err = s.walk(ctx, w, read, avail)
	end.partial = partial
	return end, err
}

// walk places the read's heads on avail (plan.Walk), each promotion a transaction of its own.
func (s *Store) walk(ctx context.Context, w *waking, read QueueRead, avail []AvailableNode) (sweepEnd, error) {
	next := read.behindCopy()
	var stop error
	walked := plan.Walk(read.heads, planNodes(avail), plan.Options{Seed: w.seed, Prefer: func(plan.Head) []string { return w.Prefer }},
		func(h plan.Head, assigned map[string]string) plan.Placement {
			p, err := s.promote(ctx, w, h, assigned)
			if err != nil {
				stop = err
				return plan.Placement{Outcome: plan.Stop}
			}
			if p.Outcome != plan.Placed {
				return p
			}
			w.res.Promoted++
			w.res.Runs = append(w.res.Runs, p.Run.RunID)
			w.res.Placed = append(w.res.Placed, slices.Collect(maps.Values(assigned))...)
			if p.Next, err = s.nextAfter(ctx, next, p.Run); err != nil {
				stop = err
				return plan.Placement{Outcome: plan.Stop}
			}
			return p
		})
	w.res.Walked += walked.Walked
	return sweepEnd{lookAgain: walked.LookAgain, unmet: walked.Unmet}, stop
}

// nextAfter is the run of placed's shape the wake walks after placed: from the runs the read
// found behind the head while they last, else read now (wake_next_of_shape).
func (s *Store) nextAfter(ctx context.Context, next map[string]behind, placed plan.Head) (*plan.Head, error) {
	b := next[placed.Shape]
	if i := slices.IndexFunc(b.runs, func(r plan.Head) bool { return r.RunID == placed.RunID }); i >= 0 {
		b.runs = b.runs[i+1:]
	}
	if len(b.runs) > 0 {
		h := b.runs[0]
		b.runs = b.runs[1:]
		next[placed.Shape] = b
		return &h, nil
	}
	next[placed.Shape] = b
	if b.complete {
		return nil, nil
	}
	h, ok, err := s.nextOfShape(ctx, placed)
	if err != nil || !ok {
		return nil, err
	}
	return &h, nil
}

// QueueRead is what wake_start read: the heads, the runs of each head's shape behind it, and
// available nodes that could serve them.
type QueueRead struct {
	heads  []plan.Head
	behind map[string]behind // by shape
	avail  []AvailableNode
}

// behind is the runs of a shape behind its head, in the order the wake takes them; complete
// when they are all the shape has queued.
type behind struct {
	runs     []plan.Head
	complete bool
}

// start reads the heads and the available nodes that could serve them (wake_start).
func (s *Store) start(ctx context.Context, held []string) (QueueRead, error) {
	start, args := s.bound.wakeStart, []any{}
	if len(held) > 0 {
		start, args = s.bound.wakeStartHolding, []any{named{"held": held}}
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
			runs      []plan.Head
			suspect   *bool
			reserved  *string
		)
		if err := rows.Scan(&isHead, &id, &shape, &createdAt, &rank, &protected, &roles, &labels, &runs, &suspect, &reserved); err != nil {
			return start.fail(err)
		}
		if !isHead {
			a := AvailableNode{NodeID: id, Labels: labels, Suspect: suspect != nil && *suspect}
			if reserved != nil {
				a.ReservedFor = *reserved
			}
			r.avail = append(r.avail, a)
			continue
		}
		h := plan.Head{RunID: id, Shape: *shape, CreatedAt: *createdAt, QueueRank: *rank, Protected: *protected, Roles: roles}
		r.heads = append(r.heads, h)
		for i := range runs {
			runs[i].Shape, runs[i].Roles = h.Shape, h.Roles
		}
		if r.behind == nil {
			r.behind = map[string]behind{}
		}
		r.behind[h.Shape] = behind{runs: runs}
	}
	if err := rows.Err(); err != nil {
		return start.fail(err)
	}
	// behind_head reads one run more than the nodes read could take: with it, the list is not
	// the whole shape.
	for shape, b := range r.behind {
		if b.complete = len(b.runs) <= len(r.avail); !b.complete {
			b.runs = b.runs[:len(r.avail)]
		}
		r.behind[shape] = b
	}
	return nil
}

// behindCopy is the read's lists behind the heads, for one walk to take runs from.
func (r QueueRead) behindCopy() map[string]behind {
	out := make(map[string]behind, len(r.behind))
	for shape, b := range r.behind {
		out[shape] = behind{runs: slices.Clone(b.runs), complete: b.complete}
	}
	return out
}

// with is the read with run queued too: the head of its shape if it goes before that shape's
// head, else among the runs behind it, in their order.
func (r QueueRead) with(run plan.Head) QueueRead {
	out := QueueRead{heads: slices.Clone(r.heads), behind: r.behindCopy(), avail: r.avail}
	i := slices.IndexFunc(out.heads, func(h plan.Head) bool { return h.Shape == run.Shape })
	if i < 0 {
		out.heads = append(out.heads, run)
		out.behind[run.Shape] = behind{complete: true}
		return out
	}
	b := out.behind[run.Shape]
	all := append([]plan.Head{out.heads[i]}, b.runs...)
	at, _ := slices.BinarySearchFunc(all, run, func(a, x plan.Head) int {
		if x.Before(a) {
			return 1
		}
		return -1
	})
	all = slices.Insert(all, at, run)
	out.heads[i], b.runs = all[0], all[1:]
	out.behind[run.Shape] = b
	return out
}

// admits says whether the queue, as read, leaves room for run submitted behind it, and where
// (nil: it waits), with the free nodes left for it (plan.Admit): its own available candidates
// are offered beside the nodes the read found.
func (r QueueRead) admits(run wire.NewRun, candidates []match.Node) (map[string]string, []match.Node) {
	free := planNodes(r.avail)
	var queued, own []string
	for _, a := range r.avail {
		queued = append(queued, a.NodeID)
	}
	for _, c := range candidates {
		if !c.Available {
			continue
		}
		own = append(own, c.ID)
		if !slices.Contains(queued, c.ID) {
			free = append(free, plan.Node{ID: c.ID, Labels: c.Labels, Suspect: c.Suspect})
		}
	}
	reserved := func(n plan.Node) bool { return n.ReservedFor != "" }
	var shapes [][]plan.Head
	for _, h := range r.heads {
		shapes = append(shapes, append([]plan.Head{h}, r.behind[h.Shape].runs...))
	}
	head := plan.Head{RunID: run.RunID, Shape: Shape(run.Roles), Roles: matchRoles(run.Roles)}
	assigned, left := plan.Admit(shapes, free, queued, own, head, run.RunID+"/")
	// A node reserved for a check is no spare: the submit's insert would refuse it anyway.
	left = slices.DeleteFunc(left, reserved)
	out := make([]match.Node, len(left))
	for i, n := range left {
		out[i] = match.Node{ID: n.ID, Labels: n.Labels, Available: true, Preferred: slices.Contains(own, n.ID), Suspect: n.Suspect}
	}
	return assigned, out
}

// planNodes are available nodes as the planner takes them.
func planNodes(avail []AvailableNode) []plan.Node {
	out := make([]plan.Node, len(avail))
	for i, a := range avail {
		out[i] = plan.Node{ID: a.NodeID, Labels: a.Labels, Suspect: a.Suspect, ReservedFor: a.ReservedFor}
	}
	return out
}

// freeByNeed reads the available nodes per need of the heads (wake_free_by_need). partial: some
// need may have more capable nodes than were read.
func (s *Store) freeByNeed(ctx context.Context, heads []plan.Head, held []string) (avail []AvailableNode, partial bool, err error) {
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
	avail, err = collect(ctx, s.pool, wakeFreeByNeedStmt, pgx.RowToStructByPos[AvailableNode], named{"needs": keys, "k": k, "held": nonNil(held)})
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

// promote places the oldest free run of h's shape, from h on, on the nodes planned for h's
// roles, and says what became of it (plan.Outcome). A promotion onto the wake's hand-over node
// reads that node's work in the same transaction (w.res.HandedOver). The error is one the walk
// cannot go on past: the database unavailable, the deadline passed; any other failure is
// logged and is the outcome Failed.
func (s *Store) promote(ctx context.Context, w *waking, h plan.Head, assigned map[string]string) (plan.Placement, error) {
	slots := roleSlots(h.Roles, assigned)
	needs, nodes := make([]string, len(slots)), make([]string, len(slots))
	for i, sl := range slots {
		needs[i], nodes[i] = sl.need, sl.node
	}
	var (
		had          []string
		runID        *string
		createdAt    *time.Time
		rank         *int
		startedAt    *time.Time
		roles, where []string
	)
	promote := wakePromoteStmt
	if h.Protected {
		promote = s.bound.wakePromoteProtected
	}
	args := named{
		"head_shape": h.Shape, "head_created_at": h.CreatedAt, "head_run_id": h.RunID, "head_queue_rank": h.QueueRank,
		"needs": needs, "nodes": nodes, "lease_ttl": s.set.LeaseTTL.Seconds(), "check_run": h.RunID,
	}
	scan := func(row pgx.Row) error { return row.Scan(&had, &runID, &createdAt, &rank, &startedAt, &roles, &where) }
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
		err = scan(promote.queryRow(ctx, s.pool, args))
	}
	switch {
	case errors.Is(err, ErrNodeChanged):
		return plan.Placement{Outcome: plan.NodesRefused, Lost: nodes}, nil
	case errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return plan.Placement{}, err
	case err != nil:
		s.log.Error("wake: promotion failed", "run_id", h.RunID, "error", err.Error())
		return plan.Placement{Outcome: plan.Failed}, nil
	case len(had) < len(nodes):
		return plan.Placement{Outcome: plan.NodesTaken, Lost: slices.DeleteFunc(nodes, func(n string) bool { return slices.Contains(had, n) })}, nil
	case runID == nil:
		return plan.Placement{Outcome: plan.ShapeTaken}, nil
	}
	placed := h
	placed.RunID, placed.CreatedAt, placed.QueueRank = *runID, *createdAt, *rank
	p := Promotion{RunID: *runID, StartedAt: *startedAt, Assigned: map[string]string{}}
	for i := range min(len(roles), len(where)) {
		p.Assigned[roles[i]] = where[i]
	}
	w.res.Promotions = append(w.res.Promotions, p)
	return plan.Placement{Outcome: plan.Placed, Run: placed}, nil
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

// nextOfShape reads the head of h's shape once the runs before it are placed.
func (s *Store) nextOfShape(ctx context.Context, h plan.Head) (plan.Head, bool, error) {
	rows, err := s.bound.wakeNextOfShape.query(ctx, s.pool, named{"head_shape": h.Shape})
	if err != nil {
		return plan.Head{}, false, err
	}
	next, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[plan.Head])
	if errors.Is(err, pgx.ErrNoRows) {
		return plan.Head{}, false, nil
	}
	return next, err == nil, s.bound.wakeNextOfShape.fail(err)
}

// needKey is a role's needs as one string: the Go twin of sql/rules.sql's need_key.
func needKey(needs []string) string { return strings.Join(needs, ",") }

// nonNil is list, or an empty list for none: ANY (NULL) would match nothing by another path.
func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

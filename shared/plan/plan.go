// Package plan is the walk of the queue over the free nodes: which queued run goes where, in
// which order, and which runs must wait. It is the one place the rules of placement live —
// queue order among contenders, backfill past a run that cannot go, starvation protection,
// which of equal nodes to take — and it is pure: the wake walks with a place that promotes in
// the database and says what happened, and the submit walks with one that always succeeds, to
// see what room a wake would leave a new run. So the two cannot disagree, and the rules are
// tested without a database.
package plan

import (
	"container/heap"
	"slices"
	"time"

	"mediator/shared/match"
)

// Head is a queued run the walk may place: the first of its shape (runs of one shape compete
// for exactly the same nodes, so the walk looks at one of them at a time).
type Head struct {
	RunID     string
	Shape     string
	CreatedAt time.Time
	QueueRank int // 100 − priority: the queue orders by it first
	Protected bool
	Roles     []match.Role
}

// Before says whether the walk takes h before o: protected runs first, in arrival order among
// themselves, then queue order — the Go twin of the store's protected, arrival and
// queue_order (sql/rules.sql; TestQueueOrderInGoIsTheQueueOrderInSQL pins them together).
// run_id compares as bytes, as the database's C collation does.
func (h Head) Before(o Head) bool {
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

// Node is a free node: available, and not yet taken by this walk.
type Node struct {
	ID     string
	Labels []string
	// Suspect: an infrastructure failure is counted against it; it is taken only when no
	// healthy node serves (match.Node.Suspect).
	Suspect bool
	// ReservedFor is the run a health check due on the node is: the node serves that run
	// alone, which so goes first on it whatever the queue holds, and keeps it from no one
	// else's protection ("" for a node open to any run).
	ReservedFor string
}

// open is the set a head may take from: every node but those reserved for another run.
func open(set []Node, h Head) []Node {
	if !slices.ContainsFunc(set, func(n Node) bool { return n.ReservedFor != "" }) {
		return set
	}
	return slices.DeleteFunc(slices.Clone(set), func(n Node) bool { return n.ReservedFor != "" && n.ReservedFor != h.RunID })
}

// Outcome is what became of one placement.
type Outcome int

const (
	// Placed: the run is on the nodes planned.
	Placed Outcome = iota
	// NodesTaken: some planned nodes were taken by another writer, which uses them; nothing
	// was written. The same head is tried again on the nodes left.
	NodesTaken
	// NodesRefused: a planned node changed under the placement and was refused at COMMIT (it
	// restarted, a lease slipped in); nothing was written. The same head is tried again on
	// the nodes left, and the walk says to look again: no one else is sure to use the node.
	NodesRefused
	// ShapeTaken: the nodes were had, but every run of the shape from the head on is placed
	// or held by another writer that will place it, end it, or wake after its commit: the
	// walk leaves the shape.
	ShapeTaken
	// Failed: the placement failed for another reason (the placer logs it); the walk leaves
	// the shape and says to look again.
	Failed
	// Stop: the placer cannot go on (the database unavailable, the deadline passed): the walk
	// ends at once.
	Stop
)

// Placement is what a place did with a head and the nodes planned for its roles.
type Placement struct {
	Outcome Outcome
	// Run is the run placed (Placed): the head, or a run of its shape behind it that another
	// writer did not hold.
	Run Head
	// Lost are the planned nodes the walk must no longer offer (NodesTaken, NodesRefused).
	Lost []string
	// Next is the next run of the shape, to walk after Run (Placed), if any.
	Next *Head
}

// Place places h on assigned (role → node), or says why not.
type Place func(h Head, assigned map[string]string) Placement

// Options tune a walk.
type Options struct {
	// Seed orders equally good nodes (match.Assign) together with each head's shape: runs of
	// one shape, one after the other, take different nodes of a lab, and walks with different
	// seeds reach for different ones.
	Seed string
	// Prefer names, for a head, the nodes it takes first among equally good ones: the node a
	// report just freed (alive, and told of its next run in the same answer), or a submit's own
	// candidates.
	Prefer func(Head) []string
}

// Walked says what a walk did.
type Walked struct {
	Walked int // heads considered, a head tried again after losing nodes counted again
	Placed []Head
	// Taken are the nodes placed on, in the order placed.
	Taken []string
	// Unmet: some head found no nodes among those offered; a walk over more of the free nodes
	// might place it.
	Unmet bool
	// LookAgain: a placement was refused or failed in a way no other writer is sure to follow
	// up: the caller should walk again from fresh state.
	LookAgain bool
	// Stopped: a placement said Stop; the walk ended there.
	Stopped bool
	// Left are the free nodes the walk did not take, in the order offered.
	Left []Node
}

// Walk places heads on free, in queue order (Head.Before), calling place for each head whose
// roles can all be matched to free nodes:
//
//   - queue order among contenders: a head is walked only once every head before it in queue
//     order has been placed or found unmet, and the runs behind a placed head (Placement.Next)
//     join the walk in their own place;
//   - backfill: a head that cannot be placed is passed over, never waited behind, so a run
//     waiting for a board does not block a later one waiting for a GPU; nothing behind it in
//     its shape can be placed either, so the shape is left;
//   - protection: a protected head that cannot be placed keeps every node that could serve one
//     of its roles from every run walked after it, so a wide run is not starved by narrow ones;
//   - a node reserved for a run (a health check due on it, Node.ReservedFor) serves that run
//     and no other, and no protection keeps it from that run;
//   - among the nodes that serve, healthy ones before suspect ones; among equally good nodes
//     (match.Assign: the fewest labels first), the head's preferred ones, then an order of the
//     seed and the shape.
//
// The walk ends when no head is left or no node is free.
func Walk(heads []Head, free []Node, opt Options, place Place) Walked {
	var w Walked
	set := slices.Clone(free)
	queue := headQueue(slices.Clone(heads))
	heap.Init(&queue)
	for queue.Len() > 0 && len(set) > 0 {
		h := heap.Pop(&queue).(Head)
		w.Walked++
		var prefer []string
		if opt.Prefer != nil {
			prefer = opt.Prefer(h)
		}
		assigned, unmet := match.Assign(h.Roles, matchNodes(open(set, h), prefer), opt.Seed+h.Shape)
		if len(unmet) > 0 {
			w.Unmet = true
			if h.Protected {
				set = withoutCapable(set, h.Roles)
			}
			continue
		}
		p := place(h, assigned)
		switch p.Outcome {
		case Stop:
			w.Stopped = true
			w.Left = set
			return w
		case NodesTaken, NodesRefused:
			if len(p.Lost) == 0 { // nothing to try the head without: it would loop
				w.LookAgain = true
				continue
			}
			set = without(set, p.Lost...)
			heap.Push(&queue, h)
			w.LookAgain = w.LookAgain || p.Outcome == NodesRefused
			continue
		case Failed:
			w.LookAgain = true
			continue
		case ShapeTaken:
			continue
		}
		w.Placed = append(w.Placed, p.Run)
		for _, role := range h.Roles {
			set = without(set, assigned[role.Name])
			w.Taken = append(w.Taken, assigned[role.Name])
		}
		if p.Next != nil {
			heap.Push(&queue, *p.Next)
		}
	}
	w.Left = set
	return w
}

// Admit says whether a run submitted now, behind every queued run, would be placed by a wake
// that walks the queue now, and where: the queued runs are walked first — shapes holds each
// shape's queued runs in the order the walk takes them, its head first, as the queue's read
// found them — every placement succeeding, and then the new run on what they leave. It returns
// the new run's assignment (nil when it would wait) and the free nodes left for it, its own
// candidates first, to pick spares from. Every queued run counts as ahead of the new one,
// whatever the priorities: the queue's read does not say which are, and assuming all of them
// takes nothing from anyone.
//
// The queued runs take the nodes the queue's read found first (queued); the new run takes its
// own candidates first (own), which come from a read of its own, so that concurrent submits
// reach for different nodes instead of colliding on those every read finds first.
func Admit(shapes [][]Head, free []Node, queued, own []string, run Head, seed string) (map[string]string, []Node) {
	var heads []Head
	behind := map[string][]Head{}
	for _, runs := range shapes {
		if len(runs) > 0 {
			heads = append(heads, runs[0])
			behind[runs[0].Shape] = runs[1:]
		}
	}
	// The new run comes after every queued run in the walk, and is told from them by its rank.
	run.Protected, run.QueueRank = false, newRunRank
	prefer := func(h Head) []string {
		if h.QueueRank == newRunRank {
			return own
		}
		return queued
	}
	free = slices.Clone(free)
	slices.SortStableFunc(free, func(a, b Node) int { return cmpBool(slices.Contains(own, b.ID), slices.Contains(own, a.ID)) })
	var got map[string]string
	walked := Walk(append(heads, run), free, Options{Seed: seed, Prefer: prefer}, func(h Head, assigned map[string]string) Placement {
		if h.QueueRank == newRunRank {
			got = assigned
			return Placement{Outcome: Stop}
		}
		p := Placement{Outcome: Placed, Run: h}
		if rest := behind[h.Shape]; len(rest) > 0 {
			p.Next, behind[h.Shape] = &rest[0], rest[1:]
		}
		return p
	})
	return got, walked.Left
}

// newRunRank is the queue rank Admit gives the new run: past every queued run's (0 to 100).
const newRunRank = 1 << 30

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

func matchNodes(set []Node, prefer []string) []match.Node {
	out := make([]match.Node, len(set))
	for i, n := range set {
		out[i] = match.Node{ID: n.ID, Labels: n.Labels, Available: true, Preferred: slices.Contains(prefer, n.ID), Suspect: n.Suspect}
	}
	return out
}

func without(set []Node, ids ...string) []Node {
	return slices.DeleteFunc(set, func(n Node) bool { return slices.Contains(ids, n.ID) })
}

// withoutCapable is set without the open nodes that could serve one of roles: a reserved node
// is its run's whatever a protected head needs.
func withoutCapable(set []Node, roles []match.Role) []Node {
	return slices.DeleteFunc(set, func(n Node) bool {
		return n.ReservedFor == "" && slices.ContainsFunc(roles, func(r match.Role) bool { return match.Satisfies(n.Labels, r.Needs) })
	})
}

// headQueue orders heads in queue order.
type headQueue []Head

func (q headQueue) Len() int           { return len(q) }
func (q headQueue) Less(i, j int) bool { return q[i].Before(q[j]) }
func (q headQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *headQueue) Push(x any)        { *q = append(*q, x.(Head)) }
func (q *headQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	*q = old[:len(old)-1]
	return h
}

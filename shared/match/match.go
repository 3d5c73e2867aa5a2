// Package match places a run's roles onto distinct nodes. It is pure: no I/O, no clock, and
// the same roles and nodes always give the same answer.
//
// It is a bipartite matching, not a greedy pick. Greedy takes the first capable node for each
// role in turn and fails on role A {x}, role B {x,y} over N1 {x,y}, N2 {x}: A grabs N1 and B
// has nothing left, although A→N2, B→N1 serves both. Augmenting paths find that assignment.
package match

import (
	"hash/fnv"
	"mediator/shared/wire"
	"slices"
	"sort"
)

// Verdict is what a run can expect from the fleet.
type Verdict string

const (
	Placeable  Verdict = wire.Placeable  // a matching exists over the available nodes
	Busy       Verdict = wire.Busy       // over the fleet, but not over the available nodes
	Impossible Verdict = wire.Impossible // not even over the fleet
	TooWide    Verdict = wire.TooWide    // more roles than MAX_RUN_WIDTH
)

// Role is a named slot with the labels its node must have.
type Role struct {
	Name  string
	Needs []string
}

// Node is a node of the fleet; Available means it could be leased now.
type Node struct {
	ID        string
	Labels    []string
	Available bool
	// Preferred nodes come first among equally good ones: the wake prefers the node whose
	// report just freed it, which is alive and hears of its next run in the same answer.
	Preferred bool
	// Suspect nodes (an infrastructure failure counted against them) come after every healthy
	// one: a suspect node serves a role only when no healthy one can.
	Suspect bool
}

// Result is the verdict with its evidence: the assignment when placeable, the unmet roles
// when impossible.
type Result struct {
	Verdict  Verdict
	Assigned map[string]string // role name → node id
	Unmet    []Role
}

// Place decides a run's verdict over the fleet. seed (the run's id) spreads runs over equally
// good nodes; see Assign.
func Place(roles []Role, fleet []Node, maxWidth int, seed string) Result {
	if len(roles) > maxWidth {
		return Result{Verdict: TooWide}
	}
	var available []Node
	for _, n := range fleet {
		if n.Available {
			available = append(available, n)
		}
	}
	if assigned, unmet := Assign(roles, available, seed); len(unmet) == 0 {
		return Result{Verdict: Placeable, Assigned: assigned}
	}
	if _, unmet := Assign(roles, fleet, seed); len(unmet) > 0 {
		return Result{Verdict: Impossible, Unmet: unmet}
	}
	return Result{Verdict: Busy}
}

// Satisfies reports whether labels contain every need.
func Satisfies(labels, needs []string) bool {
	for _, need := range needs {
		if !slices.Contains(labels, need) {
			return false
		}
	}
	return true
}

// Assign finds a maximum matching of roles onto distinct nodes and returns it with the roles
// it could not serve. Roles are tried in the order given and, for each, the capable nodes
// with the fewest labels first: a run that needs little should not take the node a more
// demanding run is waiting for.
//
// Among equally good nodes, preferred ones come first; then each seed (a run's id) has an
// order of its own, a hash of seed and node id: concurrent runs then reach for different
// boards of a lab instead of all for the first one, where all but one of them would lose the
// race. The same roles, nodes and seed always give the same assignment; an empty seed orders
// ties by node id.
func Assign(roles []Role, nodes []Node, seed string) (map[string]string, []Role) {
	type ranked struct {
		Node
		rank uint64
	}
	byRank := make([]ranked, len(nodes))
	for i, n := range nodes {
		byRank[i] = ranked{Node: n}
		if seed != "" {
			h := fnv.New64a()
			h.Write([]byte(seed + "/" + n.ID))
			byRank[i].rank = h.Sum64()
		}
	}
	sort.Slice(byRank, func(i, j int) bool {
		a, b := byRank[i], byRank[j]
		if a.Suspect != b.Suspect {
			return b.Suspect
		}
		if len(a.Labels) != len(b.Labels) {
			return len(a.Labels) < len(b.Labels)
		}
		if a.Preferred != b.Preferred {
			return a.Preferred
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.ID < b.ID
	})
	order := make([]Node, len(byRank))
	for i, r := range byRank {
		order[i] = r.Node
	}
	capable := make([][]int, len(roles))
	for r, role := range roles {
		for n, node := range order {
			if Satisfies(node.Labels, role.Needs) {
				capable[r] = append(capable[r], n)
			}
		}
	}
	holder := make([]int, len(order)) // node → role holding it, -1 for none
	for i := range holder {
		holder[i] = -1
	}
	var unmet []Role
	for r := range roles {
		seen := make([]bool, len(order))
		if !augment(r, capable, holder, seen) {
			unmet = append(unmet, roles[r])
		}
	}
	assigned := map[string]string{}
	for n, r := range holder {
		if r >= 0 {
			assigned[roles[r].Name] = order[n].ID
		}
	}
	return assigned, unmet
}

// augment finds a node for role r, moving roles already placed to other capable nodes when
// that frees one up (Kuhn's augmenting path).
func augment(r int, capable [][]int, holder []int, seen []bool) bool {
	for _, n := range capable[r] {
		if seen[n] {
			continue
		}
		seen[n] = true
		if holder[n] < 0 || augment(holder[n], capable, holder, seen) {
			holder[n] = r
			return true
		}
	}
	return false
}

// Package plantest makes random queues and fleets for the planner's property tests, and walks
// them as a wake does when every promotion succeeds: what the placement rules are checked
// against, here and in the store (whose submit must agree with the wake).
package plantest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"mediator/shared/match"
	"mediator/shared/plan"
)

var labels = []string{"a", "b", "c", "d"}

// Queue is a random queue and fleet: every queued run, each shape's in the order the walk takes
// them (its head first), and the free nodes.
type Queue struct {
	Shapes [][]plan.Head
	Nodes  []plan.Node
}

// Labels is a random set of up to most labels, each taken with probability p.
func Labels(r *rand.Rand, p float64, most int) []string {
	var out []string
	for _, l := range labels {
		if len(out) < most && r.Float64() < p {
			out = append(out, l)
		}
	}
	return out
}

// Random makes up to 4 shapes of 1 to 3 roles, 1 to 4 runs each, of mixed priorities and ages
// (some past the starvation bound, so protected), and up to 8 nodes.
func Random(r *rand.Rand) Queue {
	var q Queue
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cutoff := base.Add(time.Duration(r.IntN(100)) * time.Second) // older runs are protected
	seen := map[string]bool{}
	for s := range 1 + r.IntN(4) {
		var roles []match.Role
		for i := range 1 + r.IntN(3) {
			roles = append(roles, match.Role{Name: fmt.Sprintf("r%d", i), Needs: Labels(r, 0.4, 2)})
		}
		shape := ShapeOf(roles)
		if seen[shape] {
			continue
		}
		seen[shape] = true
		var runs []plan.Head
		for k := range 1 + r.IntN(4) {
			created := base.Add(time.Duration(r.IntN(200)) * time.Second)
			runs = append(runs, plan.Head{
				RunID: fmt.Sprintf("s%d-%d", s, k), Shape: shape, CreatedAt: created,
				QueueRank: []int{0, 50, 90}[r.IntN(3)], Protected: created.Before(cutoff), Roles: roles,
			})
		}
		slices.SortFunc(runs, Order)
		q.Shapes = append(q.Shapes, runs)
	}
	for i := range r.IntN(9) {
		q.Nodes = append(q.Nodes, plan.Node{ID: fmt.Sprintf("n%d", i), Labels: Labels(r, 0.5, 4)})
	}
	return q
}

// ShapeOf is a shape's key for roles.
func ShapeOf(roles []match.Role) string {
	var parts []string
	for _, ro := range roles {
		parts = append(parts, ro.Name+":"+strings.Join(ro.Needs, ","))
	}
	return strings.Join(parts, "|")
}

// Order is plan.Head.Before as a comparison.
func Order(a, b plan.Head) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}

// Heads are the first run of each shape.
func (q Queue) Heads() []plan.Head {
	var out []plan.Head
	for _, runs := range q.Shapes {
		out = append(out, runs[0])
	}
	return out
}

// Wake walks q over free as the wake does when every promotion succeeds: the next run of a
// shape comes from the queue. It returns the walk and the runs placed, in the order placed; stop
// says for which run to stop the walk instead of placing it (as a submit's admission does).
func (q Queue) Wake(free []plan.Node, opt plan.Options, stop func(plan.Head) bool) (plan.Walked, []plan.Head, map[string]string) {
	nextOf := map[string]*plan.Head{} // run id → the run after it in its shape
	for _, runs := range q.Shapes {
		for i := 1; i < len(runs); i++ {
			nextOf[runs[i-1].RunID] = &runs[i]
		}
	}
	var calls []plan.Head
	var stopped map[string]string
	w := plan.Walk(q.Heads(), free, opt, func(h plan.Head, assigned map[string]string) plan.Placement {
		if stop != nil && stop(h) {
			stopped = assigned
			return plan.Placement{Outcome: plan.Stop}
		}
		calls = append(calls, h)
		return plan.Placement{Outcome: plan.Placed, Run: h, Next: nextOf[h.RunID]}
	})
	return w, calls, stopped
}

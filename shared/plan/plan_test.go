package plan_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/plan/plantest"
)

// cases is how many random queues and fleets each property is checked on.
const cases = 3000

// wake walks q as the wake does when every promotion succeeds.
func wake(q plantest.Queue, free []plan.Node, opt plan.Options) (plan.Walked, []plan.Head) {
	w, calls, _ := q.Wake(free, opt, nil)
	return w, calls
}

func forEachCase(t *testing.T, check func(t *testing.T, r *rand.Rand, q plantest.Queue)) {
	t.Helper()
	for i := range cases {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		q := plantest.Random(r)
		t.Run(fmt.Sprint(i), func(t *testing.T) { check(t, r, q) })
		if t.Failed() {
			t.Fatalf("case %d: queue %+v, nodes %+v", i, q.Shapes, q.Nodes)
		}
	}
}

// Every run placed gets distinct nodes, each satisfying its role, and only free ones.
func TestWalkPlacesSoundly(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		taken := map[string]bool{}
		plan.Walk(q.Heads(), q.Nodes, plan.Options{Seed: "w/"}, func(h plan.Head, assigned map[string]string) plan.Placement {
			for _, ro := range h.Roles {
				id := assigned[ro.Name]
				i := slices.IndexFunc(q.Nodes, func(n plan.Node) bool { return n.ID == id })
				if i < 0 || taken[id] || !match.Satisfies(q.Nodes[i].Labels, ro.Needs) {
					t.Fatalf("%s role %s on %q: unknown, taken before, or not capable", h.RunID, ro.Name, id)
				}
				taken[id] = true
			}
			return plan.Placement{Outcome: plan.Placed, Run: h}
		})
	})
}

// Queue order among contenders: the walk offers runs to place in queue order, every one after
// those before it.
func TestWalkGoesInQueueOrder(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		_, calls := wake(q, q.Nodes, plan.Options{Seed: "w/"})
		for i := 1; i < len(calls); i++ {
			if calls[i].Before(calls[i-1]) {
				t.Fatalf("%s was placed after %s, which it is ahead of", calls[i].RunID, calls[i-1].RunID)
			}
		}
	})
}

// Backfill: the walk never stops at a run it cannot place; every run it leaves queued could not
// be placed on what it leaves free (which a starving run's nodes are not).
func TestWalkBackfills(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		w, calls := wake(q, q.Nodes, plan.Options{Seed: "w/"})
		for _, runs := range q.Shapes {
			placed := 0
			for _, c := range calls {
				if c.Shape == runs[0].Shape {
					placed++
				}
			}
			if placed == len(runs) {
				continue
			}
			if _, unmet := match.Assign(runs[placed].Roles, asMatch(w.Left), ""); len(unmet) == 0 {
				t.Fatalf("%s waits, and the nodes left %v could serve it", runs[placed].RunID, w.Left)
			}
		}
	})
}

// Protection: once a starving run is found unplaceable, no run after it takes a node that
// could serve one of its roles.
func TestWalkKeepsNodesForAStarvingRun(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		w, calls := wake(q, q.Nodes, plan.Options{Seed: "w/"})
		for _, runs := range q.Shapes {
			for _, p := range runs {
				if !p.Protected || slices.ContainsFunc(calls, func(c plan.Head) bool { return c.RunID == p.RunID }) {
					continue
				}
				for i, c := range calls {
					if !p.Before(c) {
						continue
					}
					for _, id := range nodesOf(w, calls, i) {
						for _, ro := range p.Roles {
							if match.Satisfies(labelsOf(q, id), ro.Needs) {
								t.Fatalf("%s, younger than the starving %s, took %s, which could serve its role %s", c.RunID, p.RunID, id, ro.Name)
							}
						}
					}
				}
			}
		}
	})
}

// A placement that loses nodes to another writer is tried again on the rest, never on a node
// lost; a refusal says to look again; the walk always ends.
func TestWalkTriesAgainWithoutLostNodes(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		lost := map[string]bool{}
		refused := false
		w := plan.Walk(q.Heads(), q.Nodes, plan.Options{Seed: "w/"}, func(h plan.Head, assigned map[string]string) plan.Placement {
			for _, id := range assigned {
				if lost[id] {
					t.Fatalf("%s was planned on %s, lost before", h.RunID, id)
				}
			}
			switch r.IntN(3) {
			case 0:
				id := assigned[h.Roles[r.IntN(len(h.Roles))].Name]
				lost[id] = true
				out := plan.NodesTaken
				if r.IntN(2) == 0 {
					out, refused = plan.NodesRefused, true
				}
				return plan.Placement{Outcome: out, Lost: []string{id}}
			case 1:
				return plan.Placement{Outcome: plan.ShapeTaken}
			}
			return plan.Placement{Outcome: plan.Placed, Run: h}
		})
		if refused && !w.LookAgain {
			t.Fatal("a refusal at COMMIT did not say to look again")
		}
	})
}

func asMatch(nodes []plan.Node) []match.Node {
	out := make([]match.Node, len(nodes))
	for i, n := range nodes {
		out[i] = match.Node{ID: n.ID, Labels: n.Labels, Available: true}
	}
	return out
}

func labelsOf(q plantest.Queue, id string) []string {
	for _, n := range q.Nodes {
		if n.ID == id {
			return n.Labels
		}
	}
	return nil
}

// nodesOf are the nodes the i-th placement took (Walked.Taken holds them in order, a role each).
func nodesOf(w plan.Walked, calls []plan.Head, i int) []string {
	k := 0
	for j := range i {
		k += len(calls[j].Roles)
	}
	return w.Taken[k : k+len(calls[i].Roles)]
}

// Healthy before suspect: a role is given a suspect node only when no healthy node it could
// use is left free by the walk — among equal candidates the healthy one always wins, and a
// suspect node still serves when nothing else does.
func TestWalkTakesASuspectNodeOnlyWhenNoHealthyOneServes(t *testing.T) {
	forEachCase(t, func(t *testing.T, r *rand.Rand, q plantest.Queue) {
		free := slices.Clone(q.Nodes)
		suspect := map[string]bool{}
		for i := range free {
			if r.IntN(3) == 0 {
				free[i].Suspect, suspect[free[i].ID] = true, true
			}
		}
		nextOf := map[string]*plan.Head{}
		for _, runs := range q.Shapes {
			for i := 1; i < len(runs); i++ {
				nextOf[runs[i-1].RunID] = &runs[i]
			}
		}
		type placed struct {
			h        plan.Head
			assigned map[string]string
		}
		var got []placed
		w := plan.Walk(q.Heads(), free, plan.Options{Seed: "w/"}, func(h plan.Head, assigned map[string]string) plan.Placement {
			got = append(got, placed{h, assigned})
			return plan.Placement{Outcome: plan.Placed, Run: h, Next: nextOf[h.RunID]}
		})
		for _, p := range got {
			for _, ro := range p.h.Roles {
				if !suspect[p.assigned[ro.Name]] {
					continue
				}
				for _, n := range w.Left {
					if !n.Suspect && match.Satisfies(n.Labels, ro.Needs) {
						t.Fatalf("%s's role %s was given suspect %s while healthy %s, which serves it, stayed free",
							p.h.RunID, ro.Name, p.assigned[ro.Name], n.ID)
					}
				}
			}
		}
	})
}

// Of two equal nodes the healthy one is taken, whatever the seed; the suspect one when it is
// the only one.
func TestWalkPrefersAHealthyNodeToASuspectOne(t *testing.T) {
	h := plan.Head{RunID: "r", Shape: "s", Roles: []match.Role{{Name: "main", Needs: []string{"board"}}}}
	for i := range 50 {
		nodes := []plan.Node{{ID: "a", Labels: []string{"board"}, Suspect: true}, {ID: "b", Labels: []string{"board"}}}
		var took string
		plan.Walk([]plan.Head{h}, nodes, plan.Options{Seed: fmt.Sprint(i)}, func(_ plan.Head, assigned map[string]string) plan.Placement {
			took = assigned["main"]
			return plan.Placement{Outcome: plan.Placed, Run: h}
		})
		if took != "b" {
			t.Fatalf("seed %d: took %s, not the healthy b", i, took)
		}
		plan.Walk([]plan.Head{h}, nodes[:1], plan.Options{Seed: fmt.Sprint(i)}, func(_ plan.Head, assigned map[string]string) plan.Placement {
			took = assigned["main"]
			return plan.Placement{Outcome: plan.Placed, Run: h}
		})
		if took != "a" {
			t.Fatalf("seed %d: a suspect node alone was not taken (%q)", i, took)
		}
	}
}

// A node reserved for a health check serves that check alone: not the run ahead of it in queue
// order that could use it, and not kept from it by a protected run that cannot be placed.
func TestAReservedNodeServesItsCheckAlone(t *testing.T) {
	board := []match.Role{{Name: "main", Needs: []string{"board"}}}
	wide := plan.Head{RunID: "wide", Shape: "w", Protected: true,
		Roles: []match.Role{{Name: "a", Needs: []string{"board"}}, {Name: "b", Needs: []string{"board"}}, {Name: "c", Needs: []string{"board"}}}}
	first := plan.Head{RunID: "first", Shape: "b", QueueRank: 0, Roles: board}
	check := plan.Head{RunID: "check", Shape: "check:x", QueueRank: 50,
		Roles: []match.Role{{Name: "node", Needs: []string{"board", "node_id=x"}}}}
	for i := range 50 {
		nodes := []plan.Node{{ID: "x", Labels: []string{"board", "node_id=x"}, ReservedFor: "check"}, {ID: "y", Labels: []string{"board", "node_id=y"}}}
		placed := map[string]string{}
		plan.Walk([]plan.Head{wide, first, check}, nodes, plan.Options{Seed: fmt.Sprint(i)}, func(h plan.Head, assigned map[string]string) plan.Placement {
			for _, n := range assigned {
				placed[h.RunID] = n
			}
			return plan.Placement{Outcome: plan.Placed, Run: h}
		})
		if placed["check"] != "x" {
			t.Fatalf("seed %d: the check was not placed on its reserved node: %v", i, placed)
		}
		if n, ok := placed["first"]; ok && n == "x" {
			t.Fatalf("seed %d: the run ahead took the node reserved for the check: %v", i, placed)
		}
		if _, ok := placed["first"]; ok {
			t.Fatalf("seed %d: the protected wide run's node y went to a younger run: %v", i, placed)
		}
	}
	// With nothing reserved, the same node goes to the run ahead.
	placed := map[string]string{}
	plan.Walk([]plan.Head{first}, []plan.Node{{ID: "x", Labels: []string{"board"}}}, plan.Options{}, func(h plan.Head, assigned map[string]string) plan.Placement {
		placed[h.RunID] = assigned["main"]
		return plan.Placement{Outcome: plan.Placed, Run: h}
	})
	if placed["first"] != "x" {
		t.Fatalf("an open node was not taken: %v", placed)
	}
}

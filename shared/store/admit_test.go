package store

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/plan/plantest"
	"mediator/shared/wire"
)

// A submit's verdict on a new run is what the wake would do with that run appended to the
// queue, behind every queued run: the submit's admission (QueueRead.admits, over the queue as
// wake_start read it — each head and the runs behind it) places the run on exactly the nodes
// a wake walking the whole queue would, or on none when the wake would leave it waiting. No
// database: the read is built as wake_start's scan builds it.
func TestASubmitAdmitsWhatTheWakeWouldPlace(t *testing.T) {
	t.Parallel()
	for i := range 3000 {
		r := rand.New(rand.NewPCG(uint64(i), 11))
		q := plantest.Random(r)

		// The read: every head with the runs behind it, and some of the nodes; the rest of the
		// nodes are the new run's own candidates (or both).
		read := QueueRead{behind: map[string]behind{}}
		for _, runs := range q.Shapes {
			read.heads = append(read.heads, runs[0])
			read.behind[runs[0].Shape] = behind{runs: runs[1:], complete: true}
		}
		var candidates []match.Node
		for _, n := range q.Nodes {
			switch r.IntN(3) {
			case 0:
				read.avail = append(read.avail, AvailableNode{NodeID: n.ID, Labels: n.Labels})
			case 1:
				candidates = append(candidates, match.Node{ID: n.ID, Labels: n.Labels, Available: true})
			default:
				read.avail = append(read.avail, AvailableNode{NodeID: n.ID, Labels: n.Labels})
				candidates = append(candidates, match.Node{ID: n.ID, Labels: n.Labels, Available: true})
			}
		}
		run := wire.NewRun{RunID: "new", Priority: []int{0, 50, 100}[r.IntN(3)],
			Roles: []wire.NewRole{{Name: "main", Needs: plantest.Labels(r, 0.4, 2)}}}
		if r.IntN(3) == 0 {
			run.Roles = append(run.Roles, wire.NewRole{Name: "peer", Needs: plantest.Labels(r, 0.4, 2)})
		}
		got, _ := read.admits(run, candidates)

		// The wake: the whole queue, the new run behind every queued run, over the nodes the
		// read found and the run's candidates, each taking first what it would reach for.
		last := plan.Head{RunID: run.RunID, Shape: Shape(run.Roles), Roles: matchRoles(run.Roles),
			CreatedAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), QueueRank: 1 << 30}
		appended := plantest.Queue{Shapes: append(slices.Clone(q.Shapes), []plan.Head{last})}
		var free []plan.Node
		var queued, own []string
		for _, a := range read.avail {
			free, queued = append(free, plan.Node{ID: a.NodeID, Labels: a.Labels}), append(queued, a.NodeID)
		}
		for _, c := range candidates {
			own = append(own, c.ID)
			if !slices.Contains(queued, c.ID) {
				free = append(free, plan.Node{ID: c.ID, Labels: c.Labels})
			}
		}
		prefer := func(h plan.Head) []string {
			if h.RunID == run.RunID {
				return own
			}
			return queued
		}
		_, _, want := appended.Wake(free, plan.Options{Seed: run.RunID + "/", Prefer: prefer},
			func(h plan.Head) bool { return h.RunID == run.RunID })
		if !maps.Equal(got, want) {
			t.Fatalf("case %d: the submit would place the new run on %v, the wake on %v\nqueue %+v\nnodes %+v", i, got, want, q.Shapes, q.Nodes)
		}
	}
}

// A read's runs behind a head take the submitted run in its place: as the head when it goes
// first, else among them in walk order.
func TestAReadTakesTheSubmittedRunInItsPlace(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	runAt := func(id string, rank, second int) plan.Head {
		return plan.Head{RunID: id, Shape: "s", QueueRank: rank, CreatedAt: at.Add(time.Duration(second) * time.Second)}
	}
	read := QueueRead{heads: []plan.Head{runAt("a", 50, 0)}, behind: map[string]behind{"s": {runs: []plan.Head{runAt("b", 50, 2), runAt("c", 50, 4)}}}}
	for _, tc := range []struct {
		run  plan.Head
		want []string
	}{
		{runAt("n", 50, 3), []string{"a", "b", "n", "c"}},
		{runAt("n", 10, 9), []string{"n", "a", "b", "c"}},
		{runAt("n", 90, 1), []string{"a", "b", "c", "n"}},
		{plan.Head{RunID: "n", Shape: "t"}, []string{"a", "b", "c"}},
	} {
		with := read.with(tc.run)
		var got []string
		for _, h := range with.heads {
			if h.Shape == "s" {
				got = append(got, h.RunID)
				for _, b := range with.behind["s"].runs {
					got = append(got, b.RunID)
				}
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s (rank %d, at %s): %v, want %v", tc.run.RunID, tc.run.QueueRank, tc.run.CreatedAt.Format(time.TimeOnly), got, tc.want)
		}
		if tc.run.Shape == "t" && (len(with.heads) != 2 || with.heads[1].RunID != "n" || !with.behind["t"].complete) {
			t.Errorf("a run of a shape the read has not: heads %v", with.heads)
		}
	}
	if len(read.heads) != 1 || len(read.behind["s"].runs) != 2 {
		t.Fatal("with changed the read it was given")
	}
}

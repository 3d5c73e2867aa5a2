package plan_test

import (
	"testing"
	"time"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/wire"
)

func head(id, shape string, rank int, at time.Time, protected bool, needs ...[]string) plan.Head {
	h := plan.Head{RunID: id, Shape: shape, CreatedAt: at, QueueRank: rank, Protected: protected}
	for i, n := range needs {
		h.Roles = append(h.Roles, match.Role{Name: string(rune('a' + i)), Needs: n})
	}
	return h
}

// Every reason Why gives, each from the smallest fleet and queue that shows it.
func TestWhyARunWaits(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	board := []string{"board"}
	gpu := []string{"gpu"}
	run := head("me", "board", 50, t0.Add(time.Minute), false, board)
	wide := head("me", "board+board", 50, t0.Add(time.Minute), false, board, board)
	free := func(ids ...string) []plan.Node {
		var out []plan.Node
		for _, id := range ids {
			out = append(out, plan.Node{ID: id, Labels: []string{"board"}})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		run     plan.Head
		capable []plan.Capacity
		heads   []plan.Head
		free    []plan.Node
		want    string
	}{
		{"no node of the fleet has the labels", run, []plan.Capacity{{}}, nil, nil, wire.WaitForCapacity},
		{"every capable node is offline", run, []plan.Capacity{{Offline: 3}}, nil, nil, wire.WaitNoLiveNode},
		{"every live one is drained, quarantined, held or checking", run,
			[]plan.Capacity{{Offline: 1, Draining: 1, Quarantined: 1, Held: 1, Checking: 1}}, nil, nil, wire.WaitUnavailable},
		{"every live one free to take work is busy", run, []plan.Capacity{{Busy: 1, Draining: 2}}, nil, nil, wire.WaitAllBusy},
		{"the most lasting role's cause wins", wide, []plan.Capacity{{Busy: 1}, {Offline: 1}}, nil, nil, wire.WaitNoLiveNode},
		{"each role has a free node, not both at once", wide, []plan.Capacity{{Available: 1}, {Available: 1}},
			[]plan.Head{wide}, free("n1"), wire.WaitNotAllRoles},
		{"a run ahead in queue order takes the free node", run, []plan.Capacity{{Available: 1}},
			[]plan.Head{head("ahead", "board-or-gpu", 40, t0.Add(2*time.Minute), false, board), run}, free("n1"), wire.WaitQueueAhead},
		{"a run of its own shape ahead of it (its head) is placed first",
			head("me", "board", 50, t0.Add(time.Minute), false, board), []plan.Capacity{{Available: 1}},
			[]plan.Head{head("first", "board", 50, t0, false, board)}, free("n1"), wire.WaitQueueAhead},
		{"a starving wide run keeps the free node from it", run, []plan.Capacity{{Available: 1}},
			[]plan.Head{head("starving", "board+gpu", 90, t0.Add(-time.Hour), true, board, gpu), run}, free("n1"), wire.WaitKeptForProtected},
		{"nothing is in its way: the next wake places it", run, []plan.Capacity{{Available: 1, Busy: 4}},
			[]plan.Head{run}, free("n1"), wire.WaitPlacing},
		{"behind a starving run that takes the node, it is queue_ahead, not kept", run, []plan.Capacity{{Available: 1}},
			[]plan.Head{head("starving", "board2", 90, t0.Add(-time.Hour), true, board), run}, free("n1"), wire.WaitQueueAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := plan.Why(tc.run, tc.capable, tc.heads, tc.free); got != tc.want {
				t.Fatalf("Why = %s, want %s", got, tc.want)
			}
		})
	}
}

// A health check's node is reserved for it: the counts, every run's, show the node checking,
// yet the check itself waits for nothing but its wake.
func TestWhyACheckSeesItsReservedNodeFree(t *testing.T) {
	t.Parallel()
	check := head("check-1", "check:check-1", 0, time.Now(), false, []string{"node_id=n1"})
	reserved := []plan.Node{{ID: "n1", Labels: []string{"node_id=n1"}, ReservedFor: "check-1"}}
	if got := plan.Why(check, []plan.Capacity{{Checking: 1}}, []plan.Head{check}, reserved); got != wire.WaitPlacing {
		t.Fatalf("the check's own wait: %s, want %s", got, wire.WaitPlacing)
	}
	other := head("other", `[["node_id=n1"]]`, 50, time.Now(), false, []string{"node_id=n1"})
	if got := plan.Why(other, []plan.Capacity{{Checking: 1}}, []plan.Head{check, other}, reserved); got != wire.WaitUnavailable {
		t.Fatalf("another run's wait on the node: %s, want %s", got, wire.WaitUnavailable)
	}
}

// Every standing the store counts (sql/rules.sql capacity_standing writes wire.Standings) has
// its count, and only offline is not live.
func TestEveryStandingIsCounted(t *testing.T) {
	t.Parallel()
	var c plan.Capacity
	for i, s := range wire.Standings {
		c.Add(s, 1)
		if c.Total() != i+1 {
			t.Fatalf("standing %s is not counted", s)
		}
	}
	if c.Live() != len(wire.Standings)-1 || c.Offline != 1 {
		t.Fatalf("live %d of %+v", c.Live(), c)
	}
}

package match_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"mediator/shared/match"
)

func node(id string, available bool, labels ...string) match.Node {
	return match.Node{ID: id, Labels: labels, Available: available}
}

// The case greedy gets wrong (DESIGN.md, Matching): A {x}, B {x,y} over N1 {x,y}, N2 {x}.
func TestNotGreedy(t *testing.T) {
	t.Parallel()
	roles := []match.Role{{Name: "A", Needs: []string{"x"}}, {Name: "B", Needs: []string{"x", "y"}}}
	// Equal label counts would let the fewest-labels order dodge the trap; give N2 a spare
	// label so the first node A tries is N1, as a greedy pick would take it.
	fleet := []match.Node{node("N1", true, "x", "y"), node("N2", true, "x", "z", "w")}
	got := match.Place(roles, fleet, 16, "")
	want := map[string]string{"A": "N2", "B": "N1"}
	if got.Verdict != match.Placeable || !reflect.DeepEqual(got.Assigned, want) {
		t.Fatalf("got %+v, want placeable %v", got, want)
	}
}

func TestVerdicts(t *testing.T) {
	t.Parallel()
	rpi := []match.Role{{Name: "dut", Needs: []string{"board=rpi4"}}}
	two := []match.Role{{Name: "a", Needs: []string{"board=rpi4"}}, {Name: "b", Needs: []string{"board=rpi4"}}}
	gpu := []match.Role{{Name: "main", Needs: []string{"gpu"}}, {Name: "host", Needs: []string{"usb-relay"}}}
	fleet := []match.Node{node("A", false, "board=rpi4"), node("B", true, "usb-relay")}
	cases := []struct {
		name  string
		roles []match.Role
		fleet []match.Node
		want  match.Verdict
		unmet []string
	}{
		{"placeable", rpi, []match.Node{node("A", true, "board=rpi4")}, match.Placeable, nil},
		{"busy: capable node leased", rpi, fleet, match.Busy, nil},
		{"impossible: nobody has gpu", gpu, fleet, match.Impossible, []string{"main"}},
		{"impossible: one board, two roles need one", two, fleet, match.Impossible, []string{"b"}},
		{"too wide", two, fleet, match.TooWide, nil},
		{"empty needs take any node", []match.Role{{Name: "any"}}, fleet, match.Placeable, nil},
	}
	for _, tc := range cases {
		width := 16
		if tc.want == match.TooWide {
			width = 1
		}
		got := match.Place(tc.roles, tc.fleet, width, "")
		if got.Verdict != tc.want {
			t.Errorf("%s: verdict %s, want %s", tc.name, got.Verdict, tc.want)
			continue
		}
		var unmet []string
		for _, r := range got.Unmet {
			unmet = append(unmet, r.Name)
		}
		if !reflect.DeepEqual(unmet, tc.unmet) {
			t.Errorf("%s: unmet %v, want %v", tc.name, unmet, tc.unmet)
		}
	}
}

// Whatever the order of the fleet, the same roles and nodes give the same assignment, every
// role gets a distinct node that satisfies it, and a matching is found whenever one exists.
func TestDeterministicAndValid(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	labels := []string{"a", "b", "c", "d"}
	for trial := range 500 {
		var fleet []match.Node
		for i := range 1 + rng.IntN(6) {
			var ls []string
			for _, l := range labels {
				if rng.IntN(2) == 0 {
					ls = append(ls, l)
				}
			}
			fleet = append(fleet, node(fmt.Sprintf("n%d", i), true, ls...))
		}
		var roles []match.Role
		for i := range 1 + rng.IntN(4) {
			roles = append(roles, match.Role{Name: fmt.Sprintf("r%d", i), Needs: []string{labels[rng.IntN(len(labels))]}})
		}
		first, unmet := match.Assign(roles, fleet, fmt.Sprint("run-", trial))
		shuffled := append([]match.Node{}, fleet...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, _ := match.Assign(roles, shuffled, fmt.Sprint("run-", trial)); !reflect.DeepEqual(first, again) {
			t.Fatalf("trial %d: %v then %v", trial, first, again)
		}
		used := map[string]bool{}
		for _, r := range roles {
			id, ok := first[r.Name]
			if !ok {
				continue
			}
			if used[id] {
				t.Fatalf("trial %d: node %s given twice", trial, id)
			}
			used[id] = true
			for _, n := range fleet {
				if n.ID == id && !match.Satisfies(n.Labels, r.Needs) {
					t.Fatalf("trial %d: %s cannot serve %s", trial, id, r.Name)
				}
			}
		}
		if len(unmet) > 0 && bruteForce(roles, fleet) {
			t.Fatalf("trial %d: a full matching exists but %v were left unmet", trial, unmet)
		}
	}
}

// bruteForce tries every assignment.
func bruteForce(roles []match.Role, fleet []match.Node) bool {
	var try func(int, map[int]bool) bool
	try = func(r int, used map[int]bool) bool {
		if r == len(roles) {
			return true
		}
		for i, n := range fleet {
			if !used[i] && match.Satisfies(n.Labels, roles[r].Needs) {
				used[i] = true
				if try(r+1, used) {
					return true
				}
				delete(used, i)
			}
		}
		return false
	}
	return try(0, map[int]bool{})
}

// Runs of one shape spread over a lab of identical boards: different seeds prefer different
// boards, so concurrent submits do not all race for the first one.
func TestSeedsSpreadOverEqualNodes(t *testing.T) {
	t.Parallel()
	var fleet []match.Node
	for i := range 20 {
		fleet = append(fleet, node(fmt.Sprintf("board-%02d", i), true, "board"))
	}
	role := []match.Role{{Name: "main", Needs: []string{"board"}}}
	chosen := map[string]bool{}
	for i := range 20 {
		a, _ := match.Assign(role, fleet, fmt.Sprint("run-", i))
		chosen[a["main"]] = true
	}
	if len(chosen) < 8 {
		t.Fatalf("20 runs chose only %d of 20 boards", len(chosen))
	}
	// A node with fewer labels still comes first, whatever the seed.
	fleet = append(fleet, node("plain", true, "board"), node("rich", true, "board", "gpu"))
	for i := range 5 {
		if a, _ := match.Assign(role, fleet[20:], fmt.Sprint("run-", i)); a["main"] != "plain" {
			t.Fatalf("seed %d took %s over the plainer node", i, a["main"])
		}
	}
}

// The node a wake was told to prefer wins among equally good nodes, but never over a node
// with fewer labels.
func TestPreferredNode(t *testing.T) {
	t.Parallel()
	role := []match.Role{{Name: "main", Needs: []string{"board"}}}
	fleet := []match.Node{node("a", true, "board"), node("b", true, "board"), node("c", true, "board")}
	fleet[1].Preferred = true
	for i := range 10 {
		if a, _ := match.Assign(role, fleet, fmt.Sprint("run-", i)); a["main"] != "b" {
			t.Fatalf("seed %d: %s, want the preferred b", i, a["main"])
		}
	}
	rich := []match.Node{node("plain", true, "board"), node("rich", true, "board", "gpu")}
	rich[1].Preferred = true
	if a, _ := match.Assign(role, rich, "x"); a["main"] != "plain" {
		t.Fatalf("the preferred node with more labels won over the plainer one: %s", a["main"])
	}
}

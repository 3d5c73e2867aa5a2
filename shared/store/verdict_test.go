package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/match"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// A submit matches over at most width capable nodes per role (available, and fleet-wide); its
// verdict must be the one a matching over the whole fleet gives.
func TestBoundedCandidatesGiveTheFullVerdict(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	labels := []string{"a", "b", "c"}
	for i := range 30 {
		var ls []string
		for _, l := range labels {
			if rng.IntN(3) == 0 {
				ls = append(ls, l)
			}
		}
		env.Heartbeat(fmt.Sprintf("n%02d", i), "b1", rng.IntN(3) == 0, ls...) // a third draining
	}
	nodes, err := env.Store.ListNodes(ctx, store.ListNodesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var fleet []match.Node
	for _, n := range nodes {
		fleet = append(fleet, match.Node{ID: n.NodeID, Labels: n.Labels, Available: n.State == "idle"})
	}
	for trial := range 200 {
		var roles []wire.NewRole
		var mroles []match.Role
		for r := range 1 + rng.IntN(4) {
			needs := []string{labels[rng.IntN(3)]}
			if rng.IntN(2) == 0 {
				needs = append(needs, labels[rng.IntN(3)])
			}
			needs = dedupe(needs)
			roles = append(roles, wire.NewRole{Name: fmt.Sprintf("r%d", r), Needs: needs})
			mroles = append(mroles, match.Role{Name: fmt.Sprintf("r%d", r), Needs: needs})
		}
		run := apitest.NewRun(fmt.Sprint("t", trial))
		run.Roles = roles
		got, err := env.Store.DryRun(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		want := match.Place(mroles, fleet, 16, run.RunID)
		if got.Verdict != want.Verdict || len(got.Unmet) != len(want.Unmet) {
			t.Fatalf("trial %d %v: verdict %s unmet %d; over the whole fleet %s unmet %d", trial, roles, got.Verdict, len(got.Unmet), want.Verdict, len(want.Unmet))
		}
		if got.Verdict == match.Placeable && !reflect.DeepEqual(got.Assigned, want.Assigned) {
			// Both are valid matchings; the bounded lists keep the fewest-labels-first choice.
			for role, node := range got.Assigned {
				if !capable(fleet, node, roles, role) {
					t.Fatalf("trial %d: %s given %s, which cannot serve it", trial, role, node)
				}
			}
		}
	}
}

func dedupe(s []string) []string {
	if len(s) == 2 && s[0] == s[1] {
		return s[:1]
	}
	if len(s) == 2 && s[0] > s[1] {
		s[0], s[1] = s[1], s[0]
	}
	return s
}

func capable(fleet []match.Node, node string, roles []wire.NewRole, role string) bool {
	for _, n := range fleet {
		for _, r := range roles {
			if n.ID == node && r.Name == role {
				return n.Available && match.Satisfies(n.Labels, r.Needs)
			}
		}
	}
	return false
}

// The walk along free_nodes stops after a few nodes each way; a label that only one free node
// of a large idle fleet carries is still found, through the labels index. The rare node is put
// where neither walk reaches: past the first nodes after the run's seed, and past the first
// nodes from the start, where the walk goes on when it reaches the end.
func TestARareLabelIsFoundInALargeIdleFleet(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	const commons = 400
	env.Exec(`INSERT INTO nodes (node_id, labels, boot_id, advert_expires_at)
		SELECT 'common-' || i, '{common}', 'b1', now() + interval '1 hour' FROM generate_series(1, $1::int) i`, commons)
	env.Exec(`UPDATE free_nodes SET spread = (substr(node_id, 8)::int - 1)::float8 / $1`, commons)
	env.Heartbeat("rare", "b1", false, "common", "rare")
	seed, reach := store.SpreadSeed("r0"), float64(store.WalkFree+8)/commons
	place := 0.3
	for _, x := range []float64{0.3, 0.55, 0.8} {
		if x > reach && (x < seed || x > seed+reach) {
			place = x
			break
		}
	}
	env.Exec(`UPDATE free_nodes SET spread = $1 WHERE node_id = 'rare'`, place)
	for i := range 3 {
		res := env.Submit(apitest.NewRun(fmt.Sprint("r", i), "rare"))
		if i == 0 && (res.Run.State != wire.Running || res.Run.Assigned["main"] != "rare") {
			t.Fatalf("a run for the one rare node, free: %s on %v", res.Run.State, res.Run.Assigned)
		}
		if i > 0 && res.Run.State != wire.Queued {
			t.Fatalf("a second run for the one rare node, now busy: %s", res.Run.State)
		}
	}
}

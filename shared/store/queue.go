package store

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"mediator/shared/match"
	"mediator/shared/wire"
)

var queueViewStmt = stmt("queue_view")

// QueueEntry is one needs signature of the queue (GET /v1/queue): what a user asks when a
// run sits there — how many wait, for how long, and whether any node could take one.
type QueueEntry struct {
	Needs             [][]string `json:"needs"`
	Queued            int        `json:"queued"`
	OldestRunID       string     `json:"oldest_run_id,omitempty"` // only to its owner and admins
	OldestWaitSeconds float64    `json:"oldest_wait_seconds"`
	// Priorities are how many wait at each priority, highest first.
	Priorities     []PriorityCount `json:"priorities"`
	CapableNodes   int             `json:"capable_nodes"`
	AvailableNodes int             `json:"available_nodes"`
	PlaceableNow   bool            `json:"placeable_now"`
}

// PriorityCount is how many queued runs of one kind have one priority.
type PriorityCount struct {
	Priority int `json:"priority"`
	Queued   int `json:"queued"`
}

// Queue summarises the queue by needs signature, oldest first, as v may see it: every client
// sees the counts, only the owner (or an admin) the id of the oldest run.
func (s *Store) Queue(ctx context.Context, v Viewer) ([]QueueEntry, error) {
	rows, err := queueViewStmt.query(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	var out []QueueEntry
	for rows.Next() {
		var e QueueEntry
		var shape, owner string
		if err := rows.Scan(&shape, &e.Queued, &e.OldestRunID, &e.OldestWaitSeconds, &owner, &e.Priorities, &e.Needs); err != nil {
			rows.Close()
			return nil, queueViewStmt.fail(err)
		}
		if !v.sees(owner) {
			e.OldestRunID = ""
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, queueViewStmt.fail(err)
	}
	if len(out) == 0 {
		return []QueueEntry{}, nil
	}
	fleet, err := s.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].CapableNodes, out[i].AvailableNodes, out[i].PlaceableNow = capacityFor(out[i].Needs, fleet)
	}
	return out, nil
}

// shapeRoles are a shape's needs as roles to match, named by their place.
func shapeRoles(needs [][]string) []match.Role {
	roles := make([]match.Role, len(needs))
	for i, n := range needs {
		roles[i] = match.Role{Name: strconv.Itoa(i), Needs: n}
	}
	return roles
}

func capacityFor(needs [][]string, fleet []Node) (capable, available int, placeable bool) {
	roles := shapeRoles(needs)
	var free []match.Node
	for _, n := range fleet {
		for _, r := range roles {
			if match.Satisfies(n.Labels, r.Needs) {
				capable++
				if takesWork(n) && !n.HealthCheckDue {
					available++
					free = append(free, match.Node{ID: n.NodeID, Labels: n.Labels, Available: true})
				}
				break
			}
		}
	}
	_, unmet := match.Assign(roles, free, "")
	return capable, available, len(unmet) == 0
}

// Shape is the canonical signature of a run's needs: each role's needs sorted, the roles
// sorted. Runs of one shape compete for exactly the same nodes.
func Shape(roles []wire.NewRole) string {
	needs := make([][]string, len(roles))
	for i, r := range roles {
		needs[i] = append([]string{}, r.Needs...)
		sort.Strings(needs[i])
	}
	sort.Slice(needs, func(i, j int) bool {
		return strings.Join(needs[i], ",") < strings.Join(needs[j], ",")
	})
	b, _ := json.Marshal(needs)
	return string(b)
}

package store

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/wire"
)

var queueViewStmt = stmt("queue_view")

// QueueEntry is one needs signature of the queue (GET /v1/queue): what a user asks when a
// run sits there — how many wait, for how long, and why.
type QueueEntry struct {
	Needs       [][]string `json:"needs"`
	Queued      int        `json:"queued"`
	OldestRunID string     `json:"oldest_run_id,omitempty"` // only to its owner and admins
	// OldestRunOwner is its owner, to admins: a run's id is its owner's name for it.
	OldestRunOwner    string  `json:"oldest_run_owner,omitempty"`
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
	// Priorities are how many wait at each priority, highest first.
	Priorities []PriorityCount `json:"priorities"`
	// CapableNodes have the labels of one of its roles, live or not; LiveNodes are those whose
	// advert is live, AvailableNodes those the queue may place on now. PlaceableNow: the
	// shape's roles fit the free nodes at once, as its Waiting says (plan.RolesFit).
	CapableNodes   int  `json:"capable_nodes"`
	LiveNodes      int  `json:"live_nodes"`
	AvailableNodes int  `json:"available_nodes"`
	PlaceableNow   bool `json:"placeable_now"`
	// Waiting is why the shape's first run in the wake's order waits (absent when the shape's
	// runs left the queue between the reads).
	Waiting *WhyWaiting `json:"waiting,omitempty"`

	shape string
}

// PriorityCount is how many queued runs of one kind have one priority.
type PriorityCount struct {
	Priority int `json:"priority"`
	Queued   int `json:"queued"`
}

// QueueView is the queue by shape, and the fleet it waits on.
type QueueView struct {
	Queue []QueueEntry `json:"queue"`
	Fleet FleetCount   `json:"fleet"`
}

// FleetCount is how many nodes the fleet has, and how many of them are live.
type FleetCount struct {
	Nodes int `json:"nodes"`
	Live  int `json:"live"`
}

// Queue summarises the queue by needs signature, oldest first, as v may see it: every client
// sees the counts, only the owner (or an admin) the id of the oldest run. Two reads, however
// deep the queue: the shapes' counts, then their heads with how their nodes stand.
func (s *Store) Queue(ctx context.Context, v Viewer) (QueueView, error) {
	rows, err := queueViewStmt.query(ctx, s.pool)
	if err != nil {
		return QueueView{}, err
	}
	out := QueueView{Queue: []QueueEntry{}}
	var groups []needGroup
	for rows.Next() {
		var e QueueEntry
		var owner string
		if err := rows.Scan(&e.shape, &e.Queued, &e.OldestRunID, &e.OldestWaitSeconds, &owner, &e.Priorities, &e.Needs); err != nil {
			rows.Close()
			return QueueView{}, queueViewStmt.fail(err)
		}
		if !v.sees(owner) {
			e.OldestRunID = ""
		}
		if v.Admin {
			e.OldestRunOwner = owner
		}
		out.Queue = append(out.Queue, e)
		groups = append(groups, needGroup(e.Needs))
	}
	if err := rows.Err(); err != nil {
		return QueueView{}, queueViewStmt.fail(err)
	}
	read, err := s.readWaiting(ctx, groups, v, 0, true)
	if err != nil {
		return QueueView{}, err
	}
	out.Fleet = read.fleet
	for i := range out.Queue {
		e := &out.Queue[i]
		g := read.standing(needGroup(e.Needs))
		e.CapableNodes, e.LiveNodes, e.AvailableNodes = g.Total(), g.Live(), g.Available
		if j := slices.IndexFunc(read.heads, func(h plan.Head) bool { return h.Shape == e.shape }); j >= 0 {
			h := read.heads[j]
			names := make([]string, len(h.Roles))
			needs := map[string][]string{}
			for k, r := range h.Roles {
				names[k], needs[r.Name] = r.Name, r.Needs
			}
			w := read.waiting(h, names, func(role string) []string { return needs[role] })
			e.Waiting, e.PlaceableNow = &w, plan.RolesFit(w.Reason)
		}
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

package plan

import (
	"slices"

	"mediator/shared/match"
	"mediator/shared/wire"
)

// Capacity is how the nodes that could serve one role stand (wire.Standings): each such node
// of the fleet counted once.
type Capacity struct {
	Available   int `json:"available"`
	Busy        int `json:"busy"`
	Held        int `json:"held"`
	Checking    int `json:"checking"`
	Draining    int `json:"draining"`
	Quarantined int `json:"quarantined"`
	Offline     int `json:"offline"`
}

// Add counts n more nodes in standing; a standing it does not know is not counted.
func (c *Capacity) Add(standing string, n int) {
	switch standing {
	case wire.StandingAvailable:
		c.Available += n
	case wire.StandingBusy:
		c.Busy += n
	case wire.StandingHeld:
		c.Held += n
	case wire.StandingChecking:
		c.Checking += n
	case wire.StandingDraining:
		c.Draining += n
	case wire.StandingQuarantined:
		c.Quarantined += n
	case wire.StandingOffline:
		c.Offline += n
	}
}

// Total is every node that could serve the role, live or not.
func (c Capacity) Total() int { return c.Live() + c.Offline }

// Live is the capable nodes whose advert is live.
func (c Capacity) Live() int {
	return c.Available + c.Busy + c.Held + c.Checking + c.Draining + c.Quarantined
}

// lasting is why a role waits from its counts alone ("" when a node is free for it), the most
// lasting cause first (wire.WaitReasons).
func (c Capacity) lasting() string {
	switch {
	case c.Total() == 0:
		return wire.WaitForCapacity
	case c.Live() == 0:
		return wire.WaitNoLiveNode
	case c.Available > 0:
		return ""
	case c.Busy == 0:
		return wire.WaitUnavailable
	}
	return wire.WaitAllBusy
}

// RolesFit says whether a run waiting for reason (Why's) has its roles fit the free nodes at
// once: every reason after not_all_roles in wire.WaitReasons.
func RolesFit(reason string) bool {
	return slices.Index(wire.WaitReasons, reason) > slices.Index(wire.WaitReasons, wire.WaitNotAllRoles)
}

// Why says why run, QUEUED, waits: one of wire.WaitReasons. capable is how the nodes that
// could serve each of its roles stand, in the order of run.Roles; heads are the first run of
// every queued shape in the order the wake takes them (head_of_shape), and free are available
// nodes that could serve them, as one read found them — for every need at least as many as
// the heads' and the run's roles together, so that the walk below finds what the wake would.
//
// The most lasting cause wins: the role whose nodes are furthest from free (Capacity.lasting).
// With a free node for every role, the roles may still not fit the free nodes at once
// (not_all_roles). Otherwise the wake's own walk (Walk) is played over the heads, every
// placement succeeding: the run's shape is walked at its head (a run behind its head waits for
// it whatever the head waits for, and for the head itself when the head is placed). A run the
// walk places would be placed by the next wake; a run it does not place lost its nodes to runs
// ahead of it, or — when the nodes those runs took would still leave it room — to a protected
// run's keep (or a health check's reservation, which the counts show as checking).
//
// A node reserved for run itself (a health check due on it, Node.ReservedFor) is free for it,
// though the counts, which are every run's, show it checking.
func Why(run Head, capable []Capacity, heads []Head, free []Node) string {
	own := slices.Clone(capable)
	for i, role := range run.Roles {
		for _, n := range free {
			if n.ReservedFor == run.RunID && match.Satisfies(n.Labels, role.Needs) && i < len(own) && own[i].Checking > 0 {
				own[i].Checking--
				own[i].Available++
			}
		}
	}
	worst := len(wire.WaitReasons)
	for _, c := range own {
		if r := c.lasting(); r != "" {
			worst = min(worst, slices.Index(wire.WaitReasons, r))
		}
	}
	if worst < len(wire.WaitReasons) {
		return wire.WaitReasons[worst]
	}
	if _, unmet := match.Assign(run.Roles, matchNodes(open(free, run), nil), ""); len(unmet) > 0 {
		return wire.WaitNotAllRoles
	}
	target := run
	if i := slices.IndexFunc(heads, func(h Head) bool { return h.Shape == run.Shape }); i >= 0 {
		target = heads[i]
	} else {
		heads = append(slices.Clone(heads), run)
	}
	placed := false
	var ahead []string // the nodes taken by the runs the walk places before target
	Walk(heads, free, Options{}, func(h Head, assigned map[string]string) Placement {
		if h.RunID == target.RunID {
			placed = true
			return Placement{Outcome: Stop}
		}
		if h.Before(target) {
			for _, id := range assigned {
				ahead = append(ahead, id)
			}
		}
		return Placement{Outcome: Placed, Run: h}
	})
	switch {
	case placed && target.RunID == run.RunID:
		return wire.WaitPlacing
	case placed:
		return wire.WaitQueueAhead
	}
	left := without(slices.Clone(free), ahead...)
	if _, unmet := match.Assign(target.Roles, matchNodes(open(left, target), nil), ""); len(unmet) == 0 {
		return wire.WaitKeptForProtected
	}
	return wire.WaitQueueAhead
}

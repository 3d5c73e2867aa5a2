package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/wire"
)

var waitingStmt = stmt("waiting")

// busyRunsShown bounds the runs a role's waiting names as holding its busy nodes: enough to
// say whose they are, without listing a lab.
const busyRunsShown = 10

// maxWalkNodes bounds the free nodes per need the explanation's walk reads (plan.Why): past
// it, a queue of that many roles is read in part, and its reasons are the walk's best guess.
const maxWalkNodes = 1000

// WhyWaiting is why a QUEUED run waits (DESIGN.md, Why a run waits): one reason for the run, and
// how the nodes that could serve each role stand.
type WhyWaiting struct {
	Reason string        `json:"reason"`
	Roles  []WaitingRole `json:"roles"`
}

// WaitingRole is how the nodes that could serve one role stand, by wire.Standings.
type WaitingRole struct {
	Role  string   `json:"role"`
	Needs []string `json:"needs"`
	plan.Capacity
	// BusyRuns are some of the runs holding its busy nodes that the viewer may see: a
	// client's own, any for an admin.
	BusyRuns []BusyRun `json:"busy_runs"`
}

// BusyRun is a run holding a node another run waits for: its id, and its owner for an admin.
type BusyRun struct {
	RunID string `json:"run_id"`
	Owner string `json:"owner,omitempty"`
}

// ExplainWaitingParams are the runs to say why of, and who reads.
type ExplainWaitingParams struct {
	// Runs: each QUEUED one gets its Waiting, in place; the others are left as they are.
	Runs   []Run
	Viewer Viewer
}

// ExplainWaiting says why each QUEUED run of p.Runs waits, in one read however many runs: the
// head of every queued shape, and the fleet once (waiting.sql). Runs in other states are left
// alone.
func (s *Store) ExplainWaiting(ctx context.Context, p ExplainWaitingParams) error {
	var queued []int
	var groups []needGroup
	for i, r := range p.Runs {
		if r.State != wire.Queued {
			continue
		}
		queued = append(queued, i)
		for _, role := range roleNames(r) {
			groups = append(groups, needGroup{r.Roles[role].Needs})
		}
	}
	if len(queued) == 0 {
		return nil
	}
	widest := 0
	for _, i := range queued {
		widest = max(widest, len(p.Runs[i].Roles))
	}
	read, err := s.readWaiting(ctx, groups, p.Viewer, widest, false)
	if err != nil {
		return err
	}
	for _, i := range queued {
		r := &p.Runs[i]
		w := read.waiting(r.waitingHead(read.heads, s.set.Starvation, read.now), roleNames(*r), func(role string) []string { return r.Roles[role].Needs })
		r.Waiting = &w
	}
	return nil
}

// roleNames are a run's roles in name order: how its waiting lists them.
func roleNames(r Run) []string {
	names := make([]string, 0, len(r.Roles))
	for name := range r.Roles {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// waitingHead is the run as the walk sees it: the head the queue read, when it is its shape's,
// else built from the run (a run behind its shape's head walks with the head: plan.Why).
func (r Run) waitingHead(heads []plan.Head, starvation time.Duration, now time.Time) plan.Head {
	if i := slices.IndexFunc(heads, func(h plan.Head) bool { return h.RunID == r.key }); i >= 0 {
		return heads[i]
	}
	roles := make([]wire.NewRole, 0, len(r.Roles))
	var matchRoles []match.Role
	for _, name := range roleNames(r) {
		roles = append(roles, wire.NewRole{Name: name, Needs: r.Roles[name].Needs})
		matchRoles = append(matchRoles, match.Role{Name: name, Needs: r.Roles[name].Needs})
	}
	shape := Shape(roles)
	if r.Kind == wire.KindHealthCheck {
		shape = "check:" + r.key
	}
	return plan.Head{RunID: r.key, Shape: shape, CreatedAt: r.CreatedAt, QueueRank: 100 - r.Priority,
		Protected: r.CreatedAt.Before(now.Add(-starvation)), Roles: matchRoles}
}

// needGroup is needs whose nodes are counted together: one role's, or every role's of a shape
// (a node counts once if it has the labels of any).
type needGroup [][]string

func (g needGroup) key() string {
	keys := make([]string, len(g))
	for i, n := range g {
		keys[i] = needKey(n)
	}
	return strings.Join(keys, "|")
}

// waitingRead is one read of the queue's heads and the fleet.
type waitingRead struct {
	now   time.Time
	heads []plan.Head
	// groups: each group's counts and busy runs, by needGroup.key.
	groups map[string]groupStanding
	// free are the nodes free to take work that the read found, each once.
	free []plan.Node
	// fleet counts every node, when asked.
	fleet FleetCount
}

type groupStanding struct {
	plan.Capacity
	busy []BusyRun
}

// readWaiting reads the heads and the fleet for groups and each head's roles, and with fleet
// every node's count, in one statement (waiting.sql). widest is the widest run to be
// explained, for how many free nodes of each need the walk needs.
func (s *Store) readWaiting(ctx context.Context, groups []needGroup, v Viewer, widest int, fleet bool) (waitingRead, error) {
	read := waitingRead{groups: map[string]groupStanding{}}
	var keys, needs []string
	seenGroup := map[string]bool{}
	for _, g := range groups {
		k := g.key()
		if seenGroup[k] {
			continue
		}
		seenGroup[k] = true
		for _, n := range g {
			keys, needs = append(keys, k), append(needs, needKey(n))
		}
	}
	st := s.bound.waiting
	rows, err := st.query(ctx, s.pool, named{"groups": keys, "needs": needs, "owner": v.Owner, "admin": v.Admin,
		"widest": widest, "fleet": fleet})
	if err != nil {
		return read, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var (
			isHead            bool
			h                 plan.Head
			runID, shape      *string
			created           *time.Time
			rank, count, live *int
			prot              *bool
			grp, standing     *string
			busyRuns, busyBy  []string
			free              []plan.Node
		)
		if err := rows.Scan(&isHead, &runID, &shape, &created, &rank, &prot, &h.Roles, &grp, &standing, &count,
			&busyRuns, &busyBy, &free, &live); err != nil {
			return read, st.fail(err)
		}
		switch {
		case isHead:
			h.RunID, h.Shape, h.CreatedAt, h.QueueRank, h.Protected = *runID, *shape, *created, *rank, *prot
			read.heads = append(read.heads, h)
			continue
		case live != nil:
			read.fleet = FleetCount{Nodes: *count, Live: *live}
			continue
		}
		g := read.groups[*grp]
		g.Add(*standing, *count)
		for i, id := range busyRuns {
			b := BusyRun{RunID: id}
			if v.Admin {
				b.Owner = busyBy[i]
			}
			if !slices.Contains(g.busy, b) { // a run of several nodes holds several
				g.busy = append(g.busy, b)
			}
		}
		read.groups[*grp] = g
		for _, n := range free {
			if !seen[n.ID] {
				seen[n.ID] = true
				read.free = append(read.free, n)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return read, st.fail(err)
	}
	read.now = time.Now()
	return read, nil
}

// standing is how the nodes of g stand (all zero when none has its labels).
func (r waitingRead) standing(g needGroup) groupStanding { return r.groups[g.key()] }

// waiting is why h waits, its roles named by names and their needs by needs.
func (r waitingRead) waiting(h plan.Head, names []string, needs func(string) []string) WhyWaiting {
	w := WhyWaiting{Roles: make([]WaitingRole, len(names))}
	for i, name := range names {
		g := r.standing(needGroup{needs(name)})
		w.Roles[i] = WaitingRole{Role: name, Needs: nonNil(needs(name)), Capacity: g.Capacity, BusyRuns: g.busy}
		if w.Roles[i].BusyRuns == nil {
			w.Roles[i].BusyRuns = []BusyRun{}
		}
	}
	// plan.Why reads the capacities in the order of h.Roles.
	ordered := make([]plan.Capacity, len(h.Roles))
	for i, role := range h.Roles {
		ordered[i] = r.standing(needGroup{role.Needs}).Capacity
	}
	w.Reason = plan.Why(h, ordered, r.heads, r.free)
	return w
}

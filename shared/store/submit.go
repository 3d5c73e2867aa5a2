package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
	"mediator/shared/plan"
	"mediator/shared/problem"
	"mediator/shared/wire"
)

var (
	submitInsertStmt   = stmt("submit_insert")
	runFingerprintStmt = stmt("run_fingerprint")
)

// Outcome is how a submission ended.
type Outcome int

const (
	Placed     Outcome = iota // 201: RUNNING now
	Waiting                   // 202: QUEUED until capable nodes free up
	Unservable                // 422: stored FAILED (no_capable_node or too_wide)
	Existing                  // 200: the same request was submitted before
)

// SubmitResult is the stored run and how it got there.
type SubmitResult struct {
	Outcome Outcome
	Run     Run
	Unmet   []match.Role
	// Wake is what the caller's wake starts from when the run queued: the queue as the
	// submit read it, and the run (WakeParams.Read and Submitted).
	Wake WakeParams
}

// Promoted is the result as the caller answers it once its wake promoted the run: placed,
// RUNNING on the nodes the promotion chose, from what the promotion returned.
func (r SubmitResult) Promoted(p Promotion) SubmitResult {
	r.Outcome = Placed
	r.Run.State, r.Run.StartedAt, r.Run.QueuePosition = wire.Running, &p.StartedAt, nil
	r.Run.Assigned = p.Assigned
	roles := make(map[string]Role, len(r.Run.Roles))
	for name, role := range r.Run.Roles {
		role.NodeID = p.Assigned[name]
		roles[name] = role
	}
	r.Run.Roles = roles
	return r
}

// Verdict is a dry run's answer: what would happen, without the queue's say in it.
type Verdict struct {
	Verdict  match.Verdict
	Assigned map[string]string
	Unmet    []match.Role
	Width    int
}

// DryRun says whether the fleet could serve run now, and with which nodes. Nothing is stored.
func (s *Store) DryRun(ctx context.Context, run wire.NewRun) (Verdict, error) {
	res, _, err := s.verdict(ctx, run)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Verdict: res.Verdict, Assigned: res.Assigned, Unmet: res.Unmet, Width: len(run.Roles)}, nil
}

// candidatesSQL reads, for each role, a few capable nodes that are available now and, when
// those are not enough to place the run, up to width capable nodes of the whole fleet. That
// is enough: a maximum matching over these lists is as large as one over the whole fleet (a
// role matched outside its list has width listed nodes, at most width-1 of them taken by the
// other roles, so it can swap to a free one).
//
// The available ones are found by walking free_nodes from a random place of the run's own
// (the seed) for at most walkFree nodes each way: a submit costs the same with two thousand
// free boards as with two, and concurrent submits start at different places instead of all
// reaching for the same board, without reading the whole pool to spread them. Only when the
// walk finds too few (a rare label in a large idle fleet) does it ask the labels index.
// Among what it finds, match.Place prefers the nodes with the fewest labels.
//
// Parameters: each role's needs ($1..$width), then the seed. The limits are written into the
// statement, and each branch's shape is fixed by its subqueries, so the plan PostgreSQL
// caches serves every label: with the limit as a parameter it judged no cached plan good
// enough and planned the statement afresh on every submit, and that took longer than running
// it; a plan cached for a rare label scanned the labels index for a common one.
//
// Each width's text is built on first use and kept: built for every width at package init,
// they would lengthen every function's cold start, and only submit uses them.
func candidatesSQL(width int) statement {
	if st, ok := candidatesByWidth.Load(width); ok {
		return st.(statement)
	}
	st, _ := candidatesByWidth.LoadOrStore(width, dynamic("submit_candidates", buildCandidatesSQL(width)))
	return st.(statement)
}

var candidatesByWidth sync.Map // width → candidatesSQL(width)

// walkFree bounds the walk along free_nodes, each way.
const walkFree = 64

func buildCandidatesSQL(width int) string {
	k, seed := candidatesPerRole(width), width+1
	var walks, parts []string
	for i := 1; i <= width; i++ {
		walk := func(cmp string) string {
			// OFFSET 0 keeps the lateral lookup a lookup: joined plainly, PostgreSQL read
			// every capable node into a hash to match the few free ones walked.
			return fmt.Sprintf(`(SELECT n.node_id, n.labels, true AS available, n.suspect
         FROM (SELECT f.node_id FROM free_nodes f WHERE f.spread %[1]s $%[2]d AND {{unheld f}} ORDER BY f.spread LIMIT %[3]d) f
         CROSS JOIN LATERAL (SELECT n.node_id, n.labels, {{suspect n}} AS suspect FROM nodes n WHERE n.node_id = f.node_id
             AND n.labels @> $%[4]d::text[] AND {{takes_work n}} AND {{unreserved n}} OFFSET 0) n)`, cmp, seed, walkFree, i)
		}
		walks = append(walks, fmt.Sprintf(`walk%d AS (
    SELECT * FROM (
        %s
        UNION ALL
        %s
    ) w LIMIT %d)`, i, walk(">="), walk("<"), k))
		parts = append(parts, fmt.Sprintf(`
    SELECT * FROM walk%[1]d
    UNION ALL
    (SELECT n.node_id, n.labels, true, {{suspect n}} FROM nodes n
     WHERE (SELECT count(*) FROM walk%[1]d) < %[2]d
       AND n.labels @> $%[1]d::text[] AND {{takes_work n}} AND {{unreserved n}}
       AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id AND {{unheld f}})
     LIMIT %[2]d)
    UNION ALL
    (SELECT n.node_id, n.labels, false, {{suspect n}} FROM nodes n
     WHERE (SELECT count(*) FROM walk%[1]d) < %[3]d AND n.labels @> $%[1]d::text[]
     LIMIT %[2]d)`, i, k, width))
	}
	return `/* submit: candidates */
WITH ` + strings.Join(walks, ",\n") + `
SELECT DISTINCT ON (c.node_id) c.node_id, c.labels, c.available, c.suspect,
       EXISTS (SELECT 1 FROM runs WHERE state = {{QUEUED}})
FROM (` + strings.Join(parts, "\n    UNION ALL") + `
) c
ORDER BY c.node_id, c.available DESC`
}

// candidatesPerRole is how many available nodes a submit reads per role: the width the
// matching needs, and a few more to pick the best fits among.
func candidatesPerRole(width int) int { return width + 2 }

// spreadSeed is the run's own place on free_nodes.spread, in [0, 1).
func spreadSeed(runID string) float64 {
	h := fnv.New32a()
	h.Write([]byte(runID))
	return float64(h.Sum32()) / (1 << 32)
}

// verdict matches run against the fleet, and says whether other runs are queued.
func (s *Store) verdict(ctx context.Context, run wire.NewRun) (match.Result, bool, error) {
	c := s.readCandidates(run)
	if c.tooWide {
		return c.place(), false, nil
	}
	rows, err := c.st.query(ctx, s.pool, c.args...)
	if err != nil {
		return match.Result{}, false, err
	}
	if err := c.scan(rows); err != nil {
		return match.Result{}, false, err
	}
	return c.place(), c.queueWaiting, nil
}

// candidateRead is one run's read of the fleet (submit_candidates) and what it found; in a
// submit, also the queue as a wake would read it now (wake_start).
type candidateRead struct {
	run          wire.NewRun
	maxWidth     int
	tooWide      bool // nothing to read: no run this wide is ever placed
	st           statement
	args         []any
	nodes        []match.Node
	queueWaiting bool
	queue        statement
	ahead        QueueRead
}

func (s *Store) readCandidates(run wire.NewRun) *candidateRead {
	c := &candidateRead{run: run, maxWidth: s.set.MaxRunWidth, tooWide: len(run.Roles) > s.set.MaxRunWidth, queue: s.bound.wakeStart}
	if c.tooWide {
		return c
	}
	for _, r := range run.Roles {
		c.args = append(c.args, append([]string{}, r.Needs...)) // never NULL: no needs match every node
	}
	c.args = append(c.args, spreadSeed(run.RunID))
	c.st = candidatesSQL(len(run.Roles))
	return c
}

// read adds the reads to a batch (nothing when the run is too wide).
func (c *candidateRead) read(b *pgx.Batch) {
	if !c.tooWide {
		b.Queue(c.st.sql, c.args...).Query(c.scan)
		b.Queue(c.queue.sql).Query(func(rows pgx.Rows) error { return c.ahead.scan(c.queue, rows) })
	}
}

func (c *candidateRead) scan(rows pgx.Rows) error {
	defer rows.Close()
	for rows.Next() {
		var n match.Node
		if err := rows.Scan(&n.ID, &n.Labels, &n.Available, &n.Suspect, &c.queueWaiting); err != nil {
			return c.st.fail(err)
		}
		c.nodes = append(c.nodes, n)
	}
	return c.st.fail(rows.Err())
}

// place matches the run to the nodes read.
func (c *candidateRead) place() match.Result {
	if c.tooWide {
		return match.Result{Verdict: match.TooWide}
	}
	return match.Place(matchRoles(c.run.Roles), c.nodes, c.maxWidth, c.run.RunID)
}

// Submit stores a run as the fleet allows: RUNNING with every role leased, QUEUED holding
// nothing, or FAILED when no node of the fleet could ever serve it. A resubmission of the
// same request answers the run as it stands; a different request under the same run_id is
// ErrRunIDConflict. The caller wakes the queue after this returns when the run queued.
//
// A new run is placed directly when nothing is queued, or when the queue leaves it room: a wake
// walking the queue now would place every queued run it can and still leave nodes for it
// (QueueRead.leaves), so it takes nothing an older run could use now, nor a node a starving
// wide run keeps. Otherwise it joins the queue and the caller's wake decides, in queue order.
// (Queueing every run while any was queued made a queue that drains in milliseconds catch
// every run behind it: each paid a wake and a promotion, and answered 202 with nodes free.)
//
// The read of the fleet and the insert are one transaction in two round trips: the read takes
// no lock, so the transaction holds nothing while the match runs in Go.
func (s *Store) Submit(ctx context.Context, run wire.NewRun) (SubmitResult, error) {
	return s.submit(ctx, run, nil)
}

// keyTries bounds the submits of one run whose key another run took between the insert's read
// of the keys and its write (keyTaken): the next try sees that run, and takes a key of its own.
const keyTries = 3

// submit is Submit; afterRead, when not nil, runs between the read and the insert (a test's
// way into the window between them).
func (s *Store) submit(ctx context.Context, run wire.NewRun, afterRead func()) (SubmitResult, error) {
	var err error
	for range keyTries {
		var res SubmitResult
		if res, err = s.submitOnce(ctx, run, afterRead); !errors.Is(err, errKeyTaken) {
			return res, err
		}
	}
	return SubmitResult{}, err
}

// errKeyTaken: the insert stored nothing, and the owner has no run of the name: another run
// took the key the insert chose (see submit_insert's key).
var errKeyTaken = &Error{problem.Unavailable, "the run's key was taken meanwhile"}

func (s *Store) submitOnce(ctx context.Context, run wire.NewRun, afterRead func()) (SubmitResult, error) {
	if s.set.LeaseTTL <= 0 {
		return SubmitResult{}, ErrLeaseTTL
	}
	type submitted struct {
		res    match.Result
		stored storedRun
		read   *QueueRead
	}
	got, err := pipelinedTx(ctx, s, func() pipelined[submitted] {
		var out submitted
		c := s.readCandidates(run)
		return pipelined[submitted]{
			read: c.read,
			write: func(b *pgx.Batch) error {
				if afterRead != nil {
					afterRead()
				}
				out.res = c.place()
				pl := placement{state: wire.Running, behindQueue: c.queueWaiting}
				switch {
				case out.res.Verdict == match.TooWide:
					pl.state, pl.reason = wire.Failed, wire.ReasonTooWide
				case out.res.Verdict == match.Impossible && !run.WaitForCapacity:
					pl.state, pl.reason = wire.Failed, wire.ReasonNoCapableNode
				case out.res.Verdict != match.Placeable:
					pl.state, out.res.Assigned = wire.Queued, nil
				case c.queueWaiting:
					var left []match.Node
					if out.res.Assigned, left = c.ahead.admits(run, c.nodes); out.res.Assigned == nil {
						pl.state = wire.Queued
					}
					pl.spare = spares(run, out.res.Assigned, left)
				default:
					pl.spare = spares(run, out.res.Assigned, c.nodes)
				}
				pl.assigned = out.res.Assigned
				if !c.tooWide {
					out.read = &c.ahead
				}
				return s.queueInsert(b, run, pl, &out.stored)
			},
			result: func() submitted { return out },
		}
	})
	if errors.Is(err, ErrNodeChanged) {
		// The node went to another run between the match and the insert: the whole
		// transaction was rolled back, so storing the run QUEUED leaves nothing behind.
		got.res.Assigned = nil
		got.stored, err = s.insertRun(ctx, run, wire.Queued, "", nil)
	}
	if err != nil {
		return SubmitResult{}, err
	}
	stored, res := got.stored, got.res
	if stored.state == "" {
		return s.resubmitted(ctx, run)
	}
	out := SubmitResult{Run: stored.view(run)}
	switch stored.state {
	case wire.Failed:
		out.Outcome, out.Unmet = Unservable, res.Unmet
	case wire.Queued:
		out.Outcome = Waiting
		out.Wake = WakeParams{Read: got.read, Submitted: &plan.Head{RunID: stored.key, Shape: Shape(run.Roles),
			CreatedAt: stored.createdAt, QueueRank: wire.MaxPriority - run.Priority, Roles: matchRoles(run.Roles)}}
	default:
		out.Outcome = Placed
	}
	return out, nil
}

// storedRun is what the insert wrote: with the request, the whole run as GET would show it,
// without reading it back.
type storedRun struct {
	key       string
	state     string
	reason    string
	createdAt time.Time
	position  *int
	assigned  map[string]string
	// holdEndsAt: a hold stored RUNNING ends by itself then.
	holdEndsAt *time.Time
}

// view is the run as stored — the same shape GetRun reads (a test holds the two together).
func (st storedRun) view(run wire.NewRun) Run {
	r := Run{
		RunID: run.RunID, Kind: run.Kind(), HoldSeconds: run.HoldSeconds, HoldEndsAt: st.holdEndsAt, State: st.state, Priority: run.Priority, Attempt: 1, MaxAttempts: run.MaxAttempts, CreatedAt: st.createdAt,
		TimeoutSeconds: run.TimeoutSeconds, QueueTimeoutSeconds: run.QueueTimeoutSeconds,
		WaitForCapacity: run.WaitForCapacity, Metadata: run.Metadata, QueuePosition: st.position,
		Roles: map[string]Role{}, owner: run.Owner, key: st.key,
	}
	if st.reason != "" {
		r.Reason = &st.reason
	}
	stepState := wire.Pending
	switch st.state {
	case wire.Running:
		r.StartedAt, r.Assigned = &r.CreatedAt, st.assigned
	case wire.Failed:
		r.FinishedAt, stepState = &r.CreatedAt, wire.Skipped
	}
	for _, role := range run.Roles {
		r.Roles[role.Name] = Role{Needs: role.Needs, NodeID: st.assigned[role.Name]}
	}
	r.Steps = []Step{} // a hold's stays empty
	for _, step := range run.Steps {
		v := Step{ID: step.ID, Role: step.Role, State: stepState, After: step.After, Retries: step.Retries}
		if stepState == wire.Skipped {
			v.FinishedAt = &r.CreatedAt
		}
		r.Steps = append(r.Steps, v)
	}
	return r
}

// insertRun stores the run alone, in a transaction of its own.
func (s *Store) insertRun(ctx context.Context, run wire.NewRun, state, reason string, assigned map[string]string) (storedRun, error) {
	var stored storedRun
	b := &pgx.Batch{}
	if err := s.queueInsert(b, run, placement{state: state, reason: reason, assigned: assigned}, &stored); err != nil {
		return stored, err
	}
	return stored, s.pool.SendBatch(ctx, b).Close()
}

// placement is how a submit stores its run.
type placement struct {
	state, reason string
	assigned      map[string]string // role → node, for a run stored RUNNING
	// spare: for a one-role run, other free nodes for its role, best first: the insert takes
	// the first of the chosen node and these that is still free.
	spare []string
	// behindQueue: the run is placed on room the queue leaves it (QueueRead.leaves), decided
	// over the queue as read; otherwise the insert stores it QUEUED should a run that arrived
	// before it be queued by then.
	behindQueue bool
}

// maxSpare bounds a one-role run's spare nodes.
const maxSpare = 3

// spares are a one-role run's spare nodes: the available nodes of list that serve its role,
// but the one assigned.
func spares(run wire.NewRun, assigned map[string]string, list []match.Node) []string {
	if len(run.Roles) != 1 || assigned == nil {
		return nil
	}
	var out []string
	for _, n := range list {
		if len(out) < maxSpare && n.Available && n.ID != assigned[run.Roles[0].Name] &&
			!slices.Contains(out, n.ID) && match.Satisfies(n.Labels, run.Roles[0].Needs) {
			out = append(out, n.ID)
		}
	}
	return out
}

// queueInsert adds the insert to a batch; once it has run, stored is what it stored (its state
// is "" when the run_id already existed).
func (s *Store) queueInsert(b *pgx.Batch, run wire.NewRun, pl placement, stored *storedRun) error {
	var aRoles, aNodes []string
	for role, node := range pl.assigned {
		aRoles, aNodes = append(aRoles, role), append(aNodes, node)
	}
	for _, node := range pl.spare {
		aRoles, aNodes = append(aRoles, run.Roles[0].Name), append(aNodes, node)
	}
	state, reason := pl.state, pl.reason
	var names []string
	for _, r := range run.Roles {
		names = append(names, r.Name)
	}
	steps := make([]map[string]any, len(run.Steps))
	for i, st := range run.Steps {
		steps[i] = map[string]any{"id": st.ID, "role": st.Role, "after": st.After, "spec": st.Spec, "retries": st.Retries, "ordinal": i}
	}
	stepsJSON, err := json.Marshal(steps)
	if err != nil {
		return err
	}
	*stored = storedRun{reason: reason}
	submitInsertStmt.queue(b, func(row pgx.Row) error {
		var roles, nodes []string
		err := row.Scan(&stored.state, &stored.createdAt, &stored.position, &roles, &nodes, &stored.key, &stored.holdEndsAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // the run_id exists: stored.state stays ""
		}
		if stored.state == wire.Running {
			// Only then: a run planned RUNNING is stored QUEUED when a chosen node was gone;
			// and a one-role run may be on a spare.
			stored.assigned = map[string]string{}
			for i := range min(len(roles), len(nodes)) {
				stored.assigned[roles[i]] = nodes[i]
			}
		}
		return err
	}, named{
		"assign_roles": aRoles, "nodes": aNodes, "state": state, "width": len(run.Roles), "behind_queue": pl.behindQueue,
		"run_id": run.RunID, "taken_key": takenKey(run.RunID), "owner": run.Owner, "reason": nullIfEmpty(reason), "priority": run.Priority, "request_hash": run.RequestHash,
		"shape": Shape(run.Roles), "max_attempts": run.MaxAttempts, "timeout": run.TimeoutSeconds,
		"queue_timeout": run.QueueTimeoutSeconds, "wait_for_capacity": run.WaitForCapacity,
		"metadata": run.Metadata, "role_names": names, "role_needs": needKeys(run.Roles),
		"steps": stepsJSON, "lease_ttl": s.set.LeaseTTL.Seconds(), "check_run": "",
		"kind": run.Kind(), "hold_seconds": run.HoldSeconds, "new_hold_seconds": run.HoldSeconds,
	})
	return nil
}

// resubmitted answers a run_id its owner used before: the same request is the run as it stands
// now; anything else is a conflict. Another owner's run of the same name is no concern of this
// one's: it is never compared, never answered.
func (s *Store) resubmitted(ctx context.Context, run wire.NewRun) (SubmitResult, error) {
	var key string
	var hash []byte
	err := runFingerprintStmt.queryRow(ctx, s.pool, run.Owner, run.RunID).Scan(&key, &hash)
	switch {
	case errors.Is(err, ErrNotFound):
		return SubmitResult{}, errKeyTaken
	case err != nil:
		return SubmitResult{}, err
	case !bytes.Equal(hash, run.RequestHash):
		return SubmitResult{}, ErrRunIDConflict
	}
	stored, err := getRun(ctx, s.pool, key)
	return SubmitResult{Outcome: Existing, Run: stored}, err
}

// takenKey is the key a run takes when its name is some run's key already: the name, cut to
// leave room, and a suffix of its own (wire.IDPattern, 128 characters at most).
func takenKey(name string) string {
	const suffix = 9 // "." and 8 characters
	if len(name) > 128-suffix {
		name = name[:128-suffix]
	}
	var b [8]byte
	for i := range b {
		b[i] = keyAlphabet[rand.IntN(len(keyAlphabet))]
	}
	return name + "." + string(b[:])
}

const keyAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func matchRoles(roles []wire.NewRole) []match.Role {
	out := make([]match.Role, len(roles))
	for i, r := range roles {
		out[i] = match.Role{Name: r.Name, Needs: r.Needs}
	}
	return out
}

// needKeys are the roles' needs as submit_insert takes them: each role's needKey.
func needKeys(roles []wire.NewRole) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = needKey(r.Needs)
	}
	return out
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

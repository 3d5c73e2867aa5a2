package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"mediator/shared/match"
)

// NewRun is a validated submission (shared/request builds it).
type NewRun struct {
	RunID               string
	Owner               string // set by the handler from the principal
	RequestHash         []byte
	Roles               []NewRole // sorted by name
	Steps               []NewStep // in request order
	MaxAttempts         int
	TimeoutSeconds      *int
	QueueTimeoutSeconds *int
	WaitForCapacity     bool
	Metadata            json.RawMessage
}

// NewRole is a role and its needs (sorted, no duplicates).
type NewRole struct {
	Name  string
	Needs []string
}

// NewStep is a step as submitted.
type NewStep struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	After   []string        `json:"after"`
	Spec    json.RawMessage `json:"spec"`
	Retries int             `json:"retries"`
}

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
	// Placeable: the run was queued only because older runs wait; it could run now if the
	// queue lets it. The caller's wake decides, in arrival order.
	Placeable bool
}

// Verdict is a dry run's answer: what would happen, without the queue's say in it.
type Verdict struct {
	Verdict  match.Verdict
	Assigned map[string]string
	Unmet    []match.Role
	Width    int
}

// DryRun says whether the fleet could serve run now, and with which nodes. Nothing is stored.
func (s *Store) DryRun(ctx context.Context, run NewRun) (Verdict, error) {
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
// reaching for the same board. It used to sort every capable free node by a hash of the run
// id: the same spread, at the price of reading the whole pool on every submit. Only when the
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
// they cost every function's cold start about 16 ms, and only submit uses them.
func candidatesSQL(width int) string {
	if sql, ok := candidatesByWidth.Load(width); ok {
		return sql.(string)
	}
	sql, _ := candidatesByWidth.LoadOrStore(width, buildCandidatesSQL(width))
	return sql.(string)
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
			return fmt.Sprintf(`(SELECT n.node_id, n.labels, true AS available
         FROM (SELECT node_id FROM free_nodes WHERE spread %[1]s $%[2]d ORDER BY spread LIMIT %[3]d) f
         CROSS JOIN LATERAL (SELECT n.node_id, n.labels FROM nodes n WHERE n.node_id = f.node_id
             AND n.labels @> $%[4]d::text[] AND n.advert_expires_at > now() AND NOT n.draining OFFSET 0) n)`, cmp, seed, walkFree, i)
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
    (SELECT n.node_id, n.labels, true FROM nodes n
     WHERE (SELECT count(*) FROM walk%[1]d) < %[2]d
       AND n.labels @> $%[1]d::text[] AND n.advert_expires_at > now() AND NOT n.draining
       AND EXISTS (SELECT 1 FROM free_nodes f WHERE f.node_id = n.node_id)
     LIMIT %[2]d)
    UNION ALL
    (SELECT n.node_id, n.labels, false FROM nodes n
     WHERE (SELECT count(*) FROM walk%[1]d) < %[3]d AND n.labels @> $%[1]d::text[]
     LIMIT %[2]d)`, i, k, width))
	}
	return `/* submit: candidates */
WITH ` + strings.Join(walks, ",\n") + `
SELECT DISTINCT ON (c.node_id) c.node_id, c.labels, c.available,
       EXISTS (SELECT 1 FROM runs WHERE state = 'QUEUED')
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
func (s *Store) verdict(ctx context.Context, run NewRun) (match.Result, bool, error) {
	roles := matchRoles(run.Roles)
	if len(roles) > s.set.MaxRunWidth {
		return match.Result{Verdict: match.TooWide}, false, nil
	}
	args := []any{}
	for _, r := range run.Roles {
		args = append(args, append([]string{}, r.Needs...)) // never NULL: no needs match every node
	}
	args = append(args, spreadSeed(run.RunID))
	rows, err := s.pool.Query(ctx, candidatesSQL(len(roles)), args...)
	if err != nil {
		return match.Result{}, false, translate(err)
	}
	var nodes []match.Node
	queueWaiting := false
	for rows.Next() {
		var n match.Node
		if err := rows.Scan(&n.ID, &n.Labels, &n.Available, &queueWaiting); err != nil {
			rows.Close()
			return match.Result{}, false, translate(err)
		}
		nodes = append(nodes, n)
	}
	if err := rows.Err(); err != nil {
		return match.Result{}, false, translate(err)
	}
	return match.Place(roles, nodes, s.set.MaxRunWidth, run.RunID), queueWaiting, nil
}

// queuePosition is the queue_position of run r when it is QUEUED: the queued runs ahead of
// it. It counts them, so a 202 costs more the deeper the queue.
const queuePosition = `CASE WHEN r.state = 'QUEUED' THEN (SELECT count(*) FROM runs q
	WHERE q.state = 'QUEUED' AND (q.created_at, q.run_id) < (r.created_at, r.run_id)) END`

// insertRunSQL stores a submission in one statement — so in one transaction — with the state
// already decided. The assignment is re-checked inside it, on the chosen nodes' free_nodes rows
// (see promoteSQL): if one was leased after the match, or another submit or promotion is
// taking it right now (SKIP LOCKED: a collision costs nothing, it does not wait), the run is
// stored QUEUED instead (avail comes up short); should a lease still slip in, leases_pkey
// refuses the whole statement and Submit stores the run QUEUED. Either way no 409 leaves the
// submit path for lack of room.
// ON CONFLICT DO NOTHING makes concurrent submits of one run_id store one row. It names no
// conflict target on purpose: runs_run_id_state_key (the target of I2's foreign key) is a
// second unique index on run_id, and with ON CONFLICT (run_id) a concurrent twin still raised
// its violation — one 500 in fifty.
const insertRunSQL = `
/* submit: insert */
WITH avail AS (
    SELECT a.role, n.node_id, n.boot_id
    FROM unnest(@assign_roles::text[], @nodes::text[]) AS a(role, node_id)` + takeFreeNodes + `
), decided AS (
    SELECT CASE WHEN @state::text = 'RUNNING' AND ((SELECT count(*) FROM avail) <> @width::int
                     OR EXISTS (SELECT 1 FROM runs WHERE state = 'QUEUED')) THEN 'QUEUED'
                ELSE @state::text END AS state
), run AS (
    INSERT INTO runs (run_id, owner, state, reason, request_hash, shape, width, max_attempts,
        timeout_seconds, queue_timeout_seconds, wait_for_capacity, metadata,
        queued_at, started_at, finished_at, deadline_at)
    SELECT @run_id::text, @owner::text, d.state, CASE WHEN d.state = 'FAILED' THEN @reason::text END, @request_hash::bytea,
        @shape::text, @width::int, @max_attempts::int, @timeout::int, @queue_timeout::int, @wait_for_capacity::bool, @metadata::jsonb,
        CASE WHEN d.state = 'QUEUED' THEN now() END,
        CASE WHEN d.state = 'RUNNING' THEN now() END,
        CASE WHEN d.state = 'FAILED' THEN now() END,
        CASE d.state WHEN 'QUEUED' THEN now() + @queue_timeout::int * interval '1 second'
                     WHEN 'RUNNING' THEN now() + @timeout::int * interval '1 second' END
    FROM decided d
    ON CONFLICT DO NOTHING
    RETURNING run_id, state, created_at
), roles AS (
    INSERT INTO run_roles (run_id, role, ordinal, needs, node_id)
    SELECT run.run_id, r.role, r.ordinal, string_to_array(r.needs, ','),
           CASE WHEN run.state = 'RUNNING' THEN a.node_id ELSE '' END
    FROM run CROSS JOIN unnest(@role_names::text[], @role_needs::text[]) WITH ORDINALITY AS r(role, needs, ordinal)
    LEFT JOIN avail a ON a.role = r.role
), steps AS (
    INSERT INTO steps (run_id, step_id, role, ordinal, after, spec, retries, state, finished_at)
    SELECT run.run_id, s.id, s.role, s.ordinal, s.after, s.spec, s.retries,
           CASE WHEN run.state = 'FAILED' THEN 'SKIPPED' ELSE 'PENDING' END,
           CASE WHEN run.state = 'FAILED' THEN now() END
    FROM run CROSS JOIN jsonb_to_recordset(@steps::jsonb)
        AS s(id text, role text, after text[], spec jsonb, retries int, ordinal int)
), leased AS (
    INSERT INTO leases (node_id, run_id, role, boot_id, expires_at)
    SELECT a.node_id, run.run_id, a.role, a.boot_id, now() + @lease_ttl::float8 * interval '1 second'
    FROM run CROSS JOIN avail a WHERE run.state = 'RUNNING'
), event AS (
    INSERT INTO run_events (run_id, attempt, kind, from_state, to_state, reason)
    SELECT run_id, 1, 'submitted', NULL, state, CASE WHEN state = 'FAILED' THEN @reason::text END FROM run
)
SELECT r.state, r.created_at, ` + queuePosition + `
FROM run r`

// Submit stores a run as the fleet allows: RUNNING with every role leased, QUEUED holding
// nothing, or FAILED when no node of the fleet could ever serve it. A resubmission of the
// same request answers the run as it stands; a different request under the same run_id is
// ErrRunIDConflict. The caller wakes the queue after this returns.
//
// A new run is placed directly only when nothing is queued. Otherwise it joins the queue and
// the caller's wake decides, in arrival order: placing it directly would let it overtake older
// runs waiting for the same nodes, and would walk straight past a starving wide run's
// reservation. The insert checks that again itself: a run queued after the match is seen.
func (s *Store) Submit(ctx context.Context, run NewRun) (SubmitResult, error) {
	if s.set.LeaseTTL <= 0 {
		return SubmitResult{}, ErrLeaseTTL
	}
	res, queueWaiting, err := s.verdict(ctx, run)
	if err != nil {
		return SubmitResult{}, err
	}
	state, reason := Running, ""
	switch {
	case res.Verdict == match.TooWide:
		state, reason = Failed, ReasonTooWide
	case res.Verdict == match.Impossible && !run.WaitForCapacity:
		state, reason = Failed, ReasonNoCapableNode
	case res.Verdict != match.Placeable || queueWaiting:
		state, res.Assigned = Queued, nil
	}
	stored, err := s.insertRun(ctx, run, state, reason, res.Assigned)
	if errors.Is(err, ErrNodeTaken) {
		// The node went to another run between the match and the insert: the whole
		// statement was rolled back, so storing the run QUEUED leaves nothing behind.
		stored, err = s.insertRun(ctx, run, Queued, "", nil)
	}
	if err != nil {
		return SubmitResult{}, err
	}
	if stored.state == "" {
		return s.resubmitted(ctx, run)
	}
	out := SubmitResult{Run: stored.view(run), Placeable: stored.state == Queued && res.Verdict == match.Placeable}
	switch stored.state {
	case Failed:
		out.Outcome, out.Unmet = Unservable, res.Unmet
	case Queued:
		out.Outcome = Waiting
	default:
		out.Outcome = Placed
	}
	return out, nil
}

// storedRun is what the insert wrote: with the request, the whole run as GET would show it,
// without reading it back.
type storedRun struct {
	state     string
	reason    string
	createdAt time.Time
	position  *int
	assigned  map[string]string
}

// view is the run as stored — the same shape GetRun reads (a test holds the two together).
func (st storedRun) view(run NewRun) Run {
	r := Run{
		RunID: run.RunID, State: st.state, Attempt: 1, MaxAttempts: run.MaxAttempts, CreatedAt: st.createdAt,
		TimeoutSeconds: run.TimeoutSeconds, QueueTimeoutSeconds: run.QueueTimeoutSeconds,
		WaitForCapacity: run.WaitForCapacity, Metadata: run.Metadata, QueuePosition: st.position,
		Roles: map[string]Role{}, owner: run.Owner,
	}
	if st.reason != "" {
		r.Reason = &st.reason
	}
	stepState := Pending
	switch st.state {
	case Running:
		r.StartedAt, r.Assigned = &r.CreatedAt, st.assigned
	case Failed:
		r.FinishedAt, stepState = &r.CreatedAt, Skipped
	}
	for _, role := range run.Roles {
		r.Roles[role.Name] = Role{Needs: role.Needs, NodeID: st.assigned[role.Name]}
	}
	for _, step := range run.Steps {
		v := Step{ID: step.ID, Role: step.Role, State: stepState, After: step.After, Retries: step.Retries}
		if stepState == Skipped {
			v.FinishedAt = &r.CreatedAt
		}
		r.Steps = append(r.Steps, v)
	}
	return r
}

// insertRun returns what it stored; its state is "" when the run_id already existed.
func (s *Store) insertRun(ctx context.Context, run NewRun, state, reason string, assigned map[string]string) (storedRun, error) {
	var aRoles, aNodes []string
	for role, node := range assigned {
		aRoles, aNodes = append(aRoles, role), append(aNodes, node)
	}
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
		return storedRun{}, err
	}
	stored := storedRun{reason: reason, assigned: assigned}
	err = s.pool.QueryRow(ctx, insertRunSQL, named{
		"assign_roles": aRoles, "nodes": aNodes, "state": state, "width": len(run.Roles),
		"run_id": run.RunID, "owner": run.Owner, "reason": nullIfEmpty(reason), "request_hash": run.RequestHash,
		"shape": Shape(run.Roles), "max_attempts": run.MaxAttempts, "timeout": run.TimeoutSeconds,
		"queue_timeout": run.QueueTimeoutSeconds, "wait_for_capacity": run.WaitForCapacity,
		"metadata": run.Metadata, "role_names": names, "role_needs": joinedNeeds(run.Roles),
		"steps": stepsJSON, "lease_ttl": s.set.LeaseTTL.Seconds(),
	}).Scan(&stored.state, &stored.createdAt, &stored.position)
	if errors.Is(err, pgx.ErrNoRows) {
		return storedRun{}, nil
	}
	if stored.state != Running {
		// The run may have been stored QUEUED although it was planned RUNNING (a chosen node
		// was gone): it holds no node then.
		stored.assigned = nil
	}
	return stored, translate(err)
}

// resubmitted answers a run_id that already exists: the same request from the same owner is
// the run as it stands now; anything else is a conflict, and says nothing about the run.
func (s *Store) resubmitted(ctx context.Context, run NewRun) (SubmitResult, error) {
	var owner string
	var hash []byte
	err := s.pool.QueryRow(ctx, `SELECT owner, request_hash FROM runs WHERE run_id = $1`, run.RunID).Scan(&owner, &hash)
	if err != nil {
		return SubmitResult{}, translate(err)
	}
	if owner != run.Owner || !bytes.Equal(hash, run.RequestHash) {
		return SubmitResult{}, ErrRunIDConflict
	}
	stored, err := s.GetRun(ctx, run.RunID, Viewer{Admin: true})
	return SubmitResult{Outcome: Existing, Run: stored}, err
}

// Viewer is who is reading: a run is visible to its owner and to admins; to anyone else it
// does not exist.
type Viewer struct {
	Owner string
	Admin bool
}

// sees says whether v may see a run of owner's: its owner and admins may.
func (v Viewer) sees(owner string) bool { return v.Admin || owner == v.Owner }

// runColumns reads a whole run — roles, steps and queue position included — in one query.
const runColumns = runFields + `,
	` + queuePosition

// runFields are runColumns without the queue position, which a list counts once per page
// (see ListRuns).
const runFields = `
	r.run_id, r.owner, r.state, r.reason, r.attempt, r.max_attempts, r.created_at, r.started_at,
	r.finished_at, r.cancel_requested_at, r.cancel_reason, r.timeout_seconds, r.queue_timeout_seconds,
	r.wait_for_capacity, r.metadata,
	(SELECT json_agg(json_build_object('name', ro.role, 'needs', ro.needs, 'node_id', ro.node_id) ORDER BY ro.ordinal)
	   FROM run_roles ro WHERE ro.run_id = r.run_id) AS roles,
	(SELECT json_agg(json_build_object('id', s.step_id, 'role', s.role, 'state', s.state, 'after', s.after,
	        'retries', s.retries, 'tries', s.tries, 'exit_code', s.exit_code, 'message', s.message,
	        'started_at', s.started_at, 'finished_at', s.finished_at) ORDER BY s.ordinal)
	   FROM steps s WHERE s.run_id = r.run_id) AS steps`

// listRunsSQL is a page of runs, newest first (%s: the filter), with the queue positions of
// its QUEUED runs counted once for the page: the queued runs ahead of its oldest queued run,
// plus each one's rank from there. (Counted per run, as GET does, a page of the newest
// queued runs counted the whole queue once per run: 180 ms a page at 10,000 queued, growing
// with the depth until statement_timeout refused the list.)
const listRunsSQL = `
WITH page AS MATERIALIZED (
    SELECT ` + runFields + ` FROM runs r%s
    ORDER BY r.created_at DESC, r.run_id DESC LIMIT @limit
), lo AS (
    SELECT created_at, run_id FROM page WHERE state = 'QUEUED' ORDER BY created_at, run_id LIMIT 1
), hi AS (
    SELECT created_at, run_id FROM page WHERE state = 'QUEUED' ORDER BY created_at DESC, run_id DESC LIMIT 1
), ahead AS (
    SELECT count(*) AS n FROM runs q, lo
    WHERE q.state = 'QUEUED' AND (q.created_at, q.run_id) < (lo.created_at, lo.run_id)
), ranked AS (
    SELECT q.run_id, row_number() OVER (ORDER BY q.created_at, q.run_id) - 1 AS rank
    FROM runs q, lo, hi
    WHERE q.state = 'QUEUED' AND (q.created_at, q.run_id) >= (lo.created_at, lo.run_id)
      AND (q.created_at, q.run_id) <= (hi.created_at, hi.run_id)
)
SELECT p.*, CASE WHEN p.state = 'QUEUED' THEN (SELECT n FROM ahead) + k.rank END
FROM page p LEFT JOIN ranked k ON k.run_id = p.run_id
ORDER BY p.created_at DESC, p.run_id DESC`

// GetRun reads one run as v may see it.
func (s *Store) GetRun(ctx context.Context, runID string, v Viewer) (Run, error) {
	run, err := getRun(ctx, s.pool, runID)
	if err != nil {
		return Run{}, err
	}
	if !v.sees(run.owner) {
		return Run{}, ErrNotFound
	}
	return run, nil
}

// getRun reads one run, whoever owns it, through q (the pool, or a transaction).
func getRun(ctx context.Context, q querier, runID string) (Run, error) {
	run, err := scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM runs r WHERE r.run_id = $1`, runID))
	return run, translate(err)
}

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var roles []struct {
		Name   string   `json:"name"`
		Needs  []string `json:"needs"`
		NodeID string   `json:"node_id"`
	}
	var position *int
	if err := row.Scan(&r.RunID, &r.owner, &r.State, &r.Reason, &r.Attempt, &r.MaxAttempts, &r.CreatedAt,
		&r.StartedAt, &r.FinishedAt, &r.CancelRequestedAt, &r.CancelReason, &r.TimeoutSeconds,
		&r.QueueTimeoutSeconds, &r.WaitForCapacity, &r.Metadata, &roles, &r.Steps, &position); err != nil {
		return Run{}, err
	}
	r.Roles = map[string]Role{}
	for _, ro := range roles {
		r.Roles[ro.Name] = Role{Needs: ro.Needs, NodeID: ro.NodeID}
		if ro.NodeID != "" {
			if r.Assigned == nil {
				r.Assigned = map[string]string{}
			}
			r.Assigned[ro.Name] = ro.NodeID
		}
	}
	r.QueuePosition = position
	return r, nil
}

// ListRunsParams pages through runs, newest first.
type ListRunsParams struct {
	Viewer Viewer
	State  string // "" for every state
	Limit  int
	After  *Cursor
}

// Cursor is the keyset position of the last run of a page.
type Cursor struct {
	CreatedAtMicros int64
	RunID           string
}

// ListRuns returns up to Limit runs after the cursor, and the cursor of the next page (nil at
// the end).
func (s *Store) ListRuns(ctx context.Context, p ListRunsParams) ([]Run, *Cursor, error) {
	var where []string
	args := named{"limit": p.Limit + 1}
	if !p.Viewer.Admin {
		where, args["owner"] = append(where, "r.owner = @owner"), p.Viewer.Owner
	}
	if p.State != "" {
		where, args["state"] = append(where, "r.state = @state"), p.State
	}
	if p.After != nil {
		where = append(where, "(r.created_at, r.run_id) < (timestamptz 'epoch' + @after_us::bigint * interval '1 microsecond', @after_id::text)")
		args["after_us"], args["after_id"] = p.After.CreatedAtMicros, p.After.RunID
	}
	filter := ""
	if len(where) > 0 {
		filter = ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(listRunsSQL, filter), args)
	if err != nil {
		return nil, nil, translate(err)
	}
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, nil, translate(err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, translate(err)
	}
	var next *Cursor
	if len(runs) > p.Limit {
		runs = runs[:p.Limit]
		last := runs[len(runs)-1]
		next = &Cursor{CreatedAtMicros: last.CreatedAt.UnixMicro(), RunID: last.RunID}
	}
	return runs, next, nil
}

// History is a run's event log, oldest first.
func (s *Store) History(ctx context.Context, runID string) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT at, attempt, kind, from_state, to_state, reason, node_id
		FROM run_events WHERE run_id = $1 ORDER BY event_id`, runID)
	if err != nil {
		return nil, translate(err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Event])
	return events, translate(err)
}

// QueueEntry is one needs signature of the queue (GET /v1/queue): what a user asks when a
// run sits there — how many wait, for how long, and whether any node could take one.
type QueueEntry struct {
	Needs             [][]string `json:"needs"`
	Queued            int        `json:"queued"`
	OldestRunID       string     `json:"oldest_run_id,omitempty"` // only to its owner and admins
	OldestWaitSeconds float64    `json:"oldest_wait_seconds"`
	CapableNodes      int        `json:"capable_nodes"`
	AvailableNodes    int        `json:"available_nodes"`
	PlaceableNow      bool       `json:"placeable_now"`
}

// Queue summarises the queue by needs signature, oldest first, as v may see it: every client
// sees the counts, only the owner (or an admin) the id of the oldest run.
func (s *Store) Queue(ctx context.Context, v Viewer) ([]QueueEntry, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT shape, count(*), (array_agg(run_id ORDER BY created_at, run_id))[1],
		       extract(epoch FROM now() - min(created_at))::float8,
		       (array_agg(owner ORDER BY created_at, run_id))[1]
		FROM runs WHERE state = 'QUEUED' GROUP BY shape ORDER BY min(created_at)`)
	if err != nil {
		return nil, translate(err)
	}
	var out []QueueEntry
	var shapes []string
	for rows.Next() {
		var e QueueEntry
		var shape, owner string
		if err := rows.Scan(&shape, &e.Queued, &e.OldestRunID, &e.OldestWaitSeconds, &owner); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		if !v.sees(owner) {
			e.OldestRunID = ""
		}
		out, shapes = append(out, e), append(shapes, shape)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	if len(out) == 0 {
		return []QueueEntry{}, nil
	}
	fleet, err := s.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if err := json.Unmarshal([]byte(shapes[i]), &out[i].Needs); err != nil {
			return nil, fmt.Errorf("store: a stored shape is not JSON: %w", err)
		}
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
				if n.State == "idle" {
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
func Shape(roles []NewRole) string {
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

func matchRoles(roles []NewRole) []match.Role {
	out := make([]match.Role, len(roles))
	for i, r := range roles {
		out[i] = match.Role{Name: r.Name, Needs: r.Needs}
	}
	return out
}

// joinedNeeds carries each role's needs as one string: labels never contain a comma.
func joinedNeeds(roles []NewRole) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = strings.Join(r.Needs, ",")
	}
	return out
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

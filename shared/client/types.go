package client

import (
	"encoding/json"
	"mediator/shared/wire"
	"net/http"
	"time"
)

// The client decodes the wire format with types of its own rather than the store's: a program
// that talks to Mediator over HTTP should not link the database layer, and a change to what
// Mediator sends should show up here, where a client sees it.

// Reply is what every answer carries besides its fields: the HTTP status and the body exactly
// as it was received, for callers that print or store the API's own JSON.
type Reply struct {
	Status int
	Body   []byte
	Header http.Header
}

// Run is a run as clients see it.
type Run struct {
	RunID string `json:"run_id"`
	// Kind is what the run is for: KindRun (submitted by a client), KindHold (a person's
	// reservation of nodes, with no steps) or KindHealthCheck (a health check Mediator placed
	// on one node).
	Kind                string            `json:"kind"`
	State               string            `json:"state"`
	Reason              *string           `json:"reason"`
	Priority            int               `json:"priority"` // 0 to 100, higher first
	Attempt             int               `json:"attempt"`
	MaxAttempts         int               `json:"max_attempts"`
	CreatedAt           time.Time         `json:"created_at"`
	StartedAt           *time.Time        `json:"started_at"`
	FinishedAt          *time.Time        `json:"finished_at"`
	CancelRequestedAt   *time.Time        `json:"cancel_requested_at"`
	CancelReason        *string           `json:"cancel_reason,omitempty"`
	TimeoutSeconds      *int              `json:"timeout_seconds"`
	QueueTimeoutSeconds *int              `json:"queue_timeout_seconds"`
	WaitForCapacity     bool              `json:"wait_for_capacity"`
	Roles               map[string]Role   `json:"roles"`
	Steps               []Step            `json:"steps"`
	Assigned            map[string]string `json:"assigned,omitempty"`
	Metadata            json.RawMessage   `json:"metadata"`
	// QueuePosition is how many runs are ahead of a QUEUED run.
	QueuePosition *int `json:"queue_position,omitempty"`
	// Waiting is why a QUEUED run waits (absent in other states).
	Waiting *Waiting `json:"waiting,omitempty"`
	// Owner and Key are shown to admins: who submitted it, and its key, unique across owners
	// (what its nodes and events name it by).
	Owner string `json:"owner,omitempty"`
	Key   string `json:"key,omitempty"`
	// HoldSeconds and HoldEndsAt are a hold's, nil for other kinds: how long it holds its
	// nodes, and, once placed, until when (a release or the time running out ends it).
	HoldSeconds *int       `json:"hold_seconds,omitempty"`
	HoldEndsAt  *time.Time `json:"hold_ends_at,omitempty"`
	// KeepOnFailureSeconds: the run keeps the boards of its failed steps this long in a hold,
	// named DebugHold once it settled FAILED step_failed; on that hold, DebugOf names the run.
	KeepOnFailureSeconds *int    `json:"keep_on_failure_seconds,omitempty"`
	DebugHold            *string `json:"debug_hold,omitempty"`
	DebugOf              *string `json:"debug_of,omitempty"`
}

// Kinds of run.
const (
	KindRun         = "run"
	KindHealthCheck = "health_check"
	KindHold        = "hold"
)

// Hold reports whether the run is a hold.
func (r Run) Hold() bool { return r.Kind == KindHold }

// ReasonText is the run's reason, or "".
func (r Run) ReasonText() string {
	if r.Reason == nil {
		return ""
	}
	return *r.Reason
}

// StepsDone counts the steps in a final state.
func (r Run) StepsDone() int {
	n := 0
	for _, s := range r.Steps {
		if wire.Final(s.State) {
			n++
		}
	}
	return n
}

// Role is one named slot of a run: what its node must have, and the node once placed.
type Role struct {
	Needs  []string `json:"needs"`
	NodeID string   `json:"node_id"`
}

// Step is one piece of work on one role.
type Step struct {
	ID         string     `json:"id"`
	Role       string     `json:"role"`
	State      string     `json:"state"`
	After      []string   `json:"after"`
	Retries    int        `json:"retries"`
	Tries      int        `json:"tries"`
	ExitCode   *int       `json:"exit_code"`
	Message    *string    `json:"message"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Outputs are what a succeeded step reported for the steps after it (nil when none).
	Outputs map[string]string `json:"outputs"`
}

// Event is one line of a run's history.
type Event struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Kind    string    `json:"kind"`
	From    *string   `json:"from"`
	To      string    `json:"to"`
	Reason  *string   `json:"reason,omitempty"`
	NodeID  *string   `json:"node_id,omitempty"`
}

// Unmet is a role no node of the fleet could ever serve, with what it needs.
type Unmet struct {
	Role  string   `json:"role"`
	Needs []string `json:"needs"`
}

// RunRequest is a submission (POST /v1/runs). Give Needs (one role, named "main") or Roles.
// A hold gives HoldSeconds and no Steps: it holds its nodes for a person's interactive work
// until released or the time is up (a role may name one node by the label node_id=<id>).
type RunRequest struct {
	RunID string                 `json:"run_id"`
	Needs []string               `json:"needs,omitzero"`
	Roles map[string]RoleRequest `json:"roles,omitzero"`
	// Steps are left out when nil: a hold has none, and says so by sending none.
	Steps       []StepRequest `json:"steps,omitzero"`
	HoldSeconds *int          `json:"hold_seconds,omitempty"`
	// KeepOnFailureSeconds keeps the boards of failed steps in a hold of the owner's this long.
	KeepOnFailureSeconds *int `json:"keep_on_failure_seconds,omitempty"`
	MaxAttempts          int  `json:"max_attempts,omitzero"`
	TimeoutSeconds       int  `json:"timeout_seconds,omitzero"`
	QueueTimeoutSeconds  int  `json:"queue_timeout_seconds,omitzero"`
	WaitForCapacity      bool `json:"wait_for_capacity,omitzero"`
	// Priority is 0 to 100, higher first; nil is the API's default (50). Clients may ask
	// up to the deployment's MAX_CLIENT_PRIORITY, admins up to 100.
	Priority *int `json:"priority,omitempty"`
	Metadata any  `json:"metadata,omitzero"`
}

// RoleRequest is one role of a submission.
type RoleRequest struct {
	Needs []string `json:"needs"`
}

// StepRequest is one step of a submission. Role may be left out of a run given by Needs.
type StepRequest struct {
	ID      string   `json:"id"`
	Role    string   `json:"role,omitzero"`
	After   []string `json:"after,omitzero"`
	Spec    any      `json:"spec,omitzero"`
	Retries int      `json:"retries,omitzero"`
}

// Submitted is the answer to a submit: 201 placed, 202 queued, 200 the same request as
// before (the run as it stands), or 422 refused (stored FAILED, with the unmet roles).
type Submitted struct {
	Reply `json:"-"`
	Run   Run     `json:"run"`
	Unmet []Unmet `json:"unmet"`
	// Warnings, of a queued run: each role no live node could serve now.
	Warnings []Warning `json:"warnings"`
}

// Warning is something to know of a request that was accepted.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Waiting is why a QUEUED run waits: one reason (wire.WaitReasons), and how the nodes that
// could serve each role stand.
type Waiting struct {
	Reason string        `json:"reason"`
	Roles  []WaitingRole `json:"roles"`
}

// WaitingRole is how the nodes that have one role's labels stand (wire.Standings).
type WaitingRole struct {
	Role        string   `json:"role"`
	Needs       []string `json:"needs"`
	Available   int      `json:"available"`
	Busy        int      `json:"busy"`
	Held        int      `json:"held"`
	Checking    int      `json:"checking"`
	Draining    int      `json:"draining"`
	Quarantined int      `json:"quarantined"`
	Offline     int      `json:"offline"`
	// BusyRuns are some of the runs holding its busy nodes that the reader may see.
	BusyRuns []BusyRun `json:"busy_runs"`
}

// BusyRun is a run holding a node another waits for; Owner for admins only.
type BusyRun struct {
	RunID string `json:"run_id"`
	Owner string `json:"owner,omitempty"`
}

// Placed: 201, the run holds its nodes.
func (s *Submitted) Placed() bool { return s.Status == http.StatusCreated }

// Queued: 202, capable nodes exist but are busy, or older runs wait.
func (s *Submitted) Queued() bool { return s.Status == http.StatusAccepted }

// Again: 200, this run_id was submitted before with the same request.
func (s *Submitted) Again() bool { return s.Status == http.StatusOK }

// Refused: 422, no node of the fleet could ever serve it.
func (s *Submitted) Refused() bool { return s.Status == http.StatusUnprocessableEntity }

// Verdict is a dry run's answer: what a submit would do now, nothing stored.
type Verdict struct {
	Reply    `json:"-"`
	Verdict  string            `json:"verdict"` // Placeable, Busy, Impossible or TooWide
	Assigned map[string]string `json:"assigned"`
	Unmet    []Unmet           `json:"unmet"`
	Width    int               `json:"width"`
}

// RunDetail is a run with its history (GET /v1/runs/{run_id}).
type RunDetail struct {
	Reply   `json:"-"`
	Run     Run     `json:"run"`
	History []Event `json:"history"`
}

// RunReply is a run as a change left it (POST /v1/runs/{run_id}/priority, /release, /extend).
type RunReply struct {
	Reply `json:"-"`
	Run   Run `json:"run"`
}

// ListRunsParams filter and page GET /v1/runs. Zero values are the API's defaults.
type ListRunsParams struct {
	State string // one of the run states, or "" for all
	Limit int    // 1..100; 0 is the API's default (20)
	After string // the cursor of the page before (RunPage.Next)
	// Priority, when set, lists only runs of that priority.
	Priority *int
	Kind     string // KindRun, KindHealthCheck or KindHold; "" for every kind
}

// RunPage is one page of runs, newest first; Next is the cursor of the next page, nil at the end.
type RunPage struct {
	Reply `json:"-"`
	Runs  []Run   `json:"runs"`
	Next  *string `json:"next"`
}

// CancelRequest is a cancel's body; Force is for admins.
type CancelRequest struct {
	Reason string `json:"reason,omitzero"`
	Force  bool   `json:"force,omitzero"`
}

// CancelReply is a cancel's answer: 200 settled (CANCELLED now), 202 asked to stop (RUNNING
// until its nodes acknowledge).
type CancelReply struct {
	Reply `json:"-"`
	Run   Run `json:"run"`
}

// Settled: the run is CANCELLED already.
func (c *CancelReply) Settled() bool { return c.Status == http.StatusOK }

// HeartbeatRequest is a node's advert (PUT /v1/nodes/{node_id}).
type HeartbeatRequest struct {
	BootID   string   `json:"boot_id"`
	Labels   []string `json:"labels"` // [] for none; never null
	Draining bool     `json:"draining"`
	// Unhealthy, when set, is why the node's own checks fail (at most 512 printable
	// characters): the node quarantines itself with that reason. Left out by a node that
	// quarantined itself, it lifts that quarantine; an admin's or the system's stays.
	Unhealthy string `json:"unhealthy,omitempty"`
}

// HeartbeatReply is what the node is told: itself as recorded, its lease, its steps, and when
// to come back.
type HeartbeatReply struct {
	Reply                `json:"-"`
	Node                 NodeInfo   `json:"node"`
	Lease                *HeldLease `json:"lease"`
	Steps                []NodeStep `json:"steps"`
	NextHeartbeatSeconds int        `json:"next_heartbeat_seconds"`
	// Push, when the stack offers it, is where the node hears it should heartbeat now.
	Push *Push `json:"push,omitempty"`
}

// Push is the broker and the node's own topic its hints come on.
type Push struct {
	URL   string `json:"url"`
	Topic string `json:"topic"`
}

// NodeInfo is a node as the fleet records it (GET /v1/nodes, and each heartbeat's answer).
type NodeInfo struct {
	NodeID string   `json:"node_id"`
	State  string   `json:"state"` // idle, leased, draining or offline
	Labels []string `json:"labels"`
	BootID string   `json:"boot_id"`
	// Draining is the effective drain: the node's own (its heartbeat's) or an admin's.
	Draining bool `json:"draining"`
	// DrainRequestedBy is the admin who drained the node, nil when no admin did.
	DrainRequestedBy *string   `json:"drain_requested_by"`
	LastSeenAt       time.Time `json:"last_seen_at"`
	// Health is HealthHealthy, HealthSuspect or HealthQuarantined; a quarantined node takes no
	// new lease. HealthReason says why it is not healthy (nil when it is), HealthSince since
	// when it is in this state.
	Health       string    `json:"health"`
	HealthReason *string   `json:"health_reason"`
	HealthSince  time.Time `json:"health_since"`
	// InfraFailures counts the node's consecutive infrastructure failures (runs it failed with
	// "infra" or lost), reset by a success on it.
	InfraFailures int `json:"infra_failures"`
	// QuarantinedBy is who quarantined the node: "self" (its agent's checks), "system" (its
	// failures or a failed health check) or "admin:<id>"; nil when it is not quarantined.
	QuarantinedBy *string `json:"quarantined_by"`
	// HealthCheckDue: a health check is to run on the node before any other work.
	HealthCheckDue bool `json:"health_check_due"`
	// The run that holds the node (by the id its owner chose), its owner and kind, the role,
	// and since when: nil on a free node.
	RunID    *string    `json:"run_id,omitempty"`
	RunOwner *string    `json:"run_owner,omitempty"`
	RunKind  *string    `json:"run_kind,omitempty"`
	Role     *string    `json:"role,omitempty"`
	LeasedAt *time.Time `json:"leased_at,omitempty"`
}

// Health states of a node.
const (
	HealthHealthy     = "healthy"
	HealthSuspect     = "suspect"
	HealthQuarantined = "quarantined"
)

// NodeDetail is a node with its recent history (GET /v1/nodes/{node_id}, admins).
type NodeDetail struct {
	Reply   `json:"-"`
	Node    NodeInfo    `json:"node"`
	History []NodeEvent `json:"history"`
}

// NodeEvent is one line of a node's history, newest first: a change of its health (Kind
// "health", From and To the states) or a lease it held (Kind "lease", RunID the run).
type NodeEvent struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	From   *string   `json:"from"`
	To     *string   `json:"to"`
	Reason *string   `json:"reason"`
	RunID  *string   `json:"run_id"`
}

// QuarantineRequest is an admin's quarantine of a node (POST /v1/nodes/{node_id}/quarantine).
type QuarantineRequest struct {
	Reason string `json:"reason"`
}

// HealthCheckRequest registers a health check (PUT /v1/health-checks/{name}): the nodes it
// applies to (Needs), its steps (as a one-role run's), and how often it runs on a healthy node
// (EverySeconds; 0 for only when a node is suspect or its quarantine is lifted).
type HealthCheckRequest struct {
	Needs        []string      `json:"needs"`
	Steps        []StepRequest `json:"steps"`
	EverySeconds int           `json:"every_seconds,omitzero"`
}

// HealthCheck is a registered health check.
type HealthCheck struct {
	Name         string        `json:"name"`
	Needs        []string      `json:"needs"`
	Steps        []StepRequest `json:"steps"`
	EverySeconds *int          `json:"every_seconds"`
}

// HealthCheckReply is one health check: as PUT stored it, as GET reads it, or as DELETE
// removed it.
type HealthCheckReply struct {
	Reply       `json:"-"`
	HealthCheck HealthCheck `json:"health_check"`
}

// HealthCheckList is every registered health check (GET /v1/health-checks).
type HealthCheckList struct {
	Reply        `json:"-"`
	HealthChecks []HealthCheck `json:"health_checks"`
}

// HeldLease is a node's lease as the node sees it: its reports are fenced by Epoch.
type HeldLease struct {
	RunID     string    `json:"run_id"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// DebugOf: the lease is a debug hold's, of this run's key (heartbeat answers only).
	DebugOf *string `json:"debug_of,omitempty"`
}

// NodeStep is a step a node holds, with what it may do about it and what it needs to run.
type NodeStep struct {
	RunID    string          `json:"run_id"`
	StepID   string          `json:"step_id"`
	Role     string          `json:"role"`
	Attempt  int             `json:"attempt"` // the run's attempt
	Spec     json.RawMessage `json:"spec"`
	State    string          `json:"state"`
	Runnable bool            `json:"runnable"`
	Cancel   bool            `json:"cancel"`
	// KeepOnFailure: the run keeps a failed step's board in a debug hold, and the agent its
	// directory.
	KeepOnFailure bool `json:"keep_on_failure"`
	// Assigned is every role's node.
	Assigned map[string]string `json:"assigned"`
	// Inputs are the outputs of each step it waits for, by step ({} for one that gave none).
	Inputs map[string]map[string]string `json:"inputs"`
}

// ReportRequest is a step report, fenced by the lease's epoch and the boot it was granted under.
type ReportRequest struct {
	NodeID   string  `json:"node_id"`
	BootID   string  `json:"boot_id"`
	Epoch    int64   `json:"epoch"`
	Status   string  `json:"status"` // Started, ReportSucceeded, ReportFailed or ReportCancelled
	ExitCode *int    `json:"exit_code,omitempty"`
	Message  *string `json:"message,omitempty"`
	Output   *string `json:"output,omitempty"`
	// Outputs go with a succeeded report only: string values under keys matching
	// ^[A-Za-z_][A-Za-z0-9_]{0,63}$, at most 4 KiB of compact JSON.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Failure goes with a failed report: FailureInfra when the machine could not run the step
	// (it counts against the node's health), FailureTest — the default, left out — when the
	// step ran and failed (it never does).
	Failure string `json:"failure,omitempty"`
	// Log goes with a terminal report (succeeded, failed, cancelled): the step's log of this
	// attempt as the agent stored it, every try, cap applied.
	Log *LogSummary `json:"log,omitempty"`
}

// Kinds of failure a failed report gives.
const (
	FailureTest  = "test"
	FailureInfra = "infra"
)

// LogSummary is what a terminal report says of the step's log: its size and SHA-256 (lower-case
// hex) as stored — the bytes a reader gets by joining the chunks in order — and whether every
// chunk was uploaded. Uploaded false: the node could not store it all (the full copy stays on
// the node), and the log reads incomplete.
type LogSummary struct {
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256"`
	Uploaded bool   `json:"uploaded"`
}

// LogURLsRequest asks for upload URLs (POST /v1/runs/{run_id}/steps/{step_id}/log-urls),
// fenced like a report. From is the first chunk sequence number wanted (0 for the first), Count
// how many (1 to 64).
type LogURLsRequest struct {
	NodeID string `json:"node_id"`
	BootID string `json:"boot_id"`
	Epoch  int64  `json:"epoch"`
	From   int    `json:"from"`
	Count  int    `json:"count"`
}

// LogUpload is a batch of presigned PUT URLs for one try of a step, with the rules the agent
// uploads by. Each chunk is one PUT of at most ChunkMaxBytes with a Content-MD5 header (S3
// verifies it); Live is the URL of the try's live tail, overwritten on each flush once the try
// passed MaxBytes. A 403 from S3 means the URLs died (their credentials expired): ask for fresh
// ones, from the same sequence number.
type LogUpload struct {
	Reply         `json:"-"`
	Try           int        `json:"try"`
	Epoch         int64      `json:"epoch"`
	Chunks        []ChunkURL `json:"chunks"`
	Live          string     `json:"live_url"`
	ExpiresAt     time.Time  `json:"expires_at"`
	ChunkMaxBytes int64      `json:"chunk_max_bytes"`
	MaxBytes      int64      `json:"max_bytes"`     // per try: past it only a rolling tail is kept
	TailBytes     int64      `json:"tail_bytes"`    // the tail kept past MaxBytes
	FlushSeconds  float64    `json:"flush_seconds"` // the longest output waits before it is uploaded
}

// ChunkURL is where chunk Seq of the try goes.
type ChunkURL struct {
	Seq int    `json:"seq"`
	URL string `json:"url"`
}

// StepLog is a step's log as it stands (GET /v1/runs/{run_id}/steps/{step_id}/log): its chunks
// in order, each a presigned GET URL valid until ExpiresAt. Complete: the step of that attempt
// is final, its node said it uploaded everything, and the chunks are all in; Bytes and SHA256
// are then the log's, to check against. Stored false: the stack keeps no logs (no bucket).
type StepLog struct {
	Reply     `json:"-"`
	RunID     string     `json:"run_id"`
	StepID    string     `json:"step_id"`
	Attempt   int        `json:"attempt"`
	State     string     `json:"state"` // the step's state in that attempt
	Stored    bool       `json:"stored"`
	Complete  bool       `json:"complete"`
	Bytes     *int64     `json:"bytes"`
	SHA256    *string    `json:"sha256"`
	ExpiresAt time.Time  `json:"expires_at"`
	Chunks    []LogChunk `json:"chunks"`
	// More: the answer is a page, and chunks past its last follow; read again from where its
	// chunks end (StepLogParams.From).
	More bool `json:"more"`
	// Live is the live tail of a try past its cap, while it runs: the newest output, which no
	// chunk holds yet.
	Live *LiveTail `json:"live"`
}

// StepLogParams choose what of a step's log to read: Attempt 0 is the run's latest; From is
// the byte offset to list from (chunks that end at or before it are left out).
type StepLogParams struct {
	Attempt int
	From    int64
}

// LogChunk is one stored chunk: Offset is where its bytes start in the log.
type LogChunk struct {
	Try    int    `json:"try"`
	Seq    int    `json:"seq"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	URL    string `json:"url"`
}

// LiveTail is a capped try's rolling tail while it runs.
type LiveTail struct {
	Try   int    `json:"try"`
	Bytes int64  `json:"bytes"`
	URL   string `json:"url"`
}

// ReportReply is what a report did. Next are steps of this run the node may start now;
// NextRun, when the report freed the node and a queued run was placed on it, is that run.
type ReportReply struct {
	Reply     `json:"-"`
	RunID     string     `json:"run_id"`
	StepID    string     `json:"step_id"`
	StepState string     `json:"step_state"`
	RunState  string     `json:"run_state"`
	Next      []NodeStep `json:"next"`
	NextRun   *NextRun   `json:"next_run,omitempty"`
	// Log answers a started report in a stack that keeps logs: the try's first batch of upload
	// URLs, so a short step costs no call of its own for them.
	Log *LogUpload `json:"log,omitempty"`
}

// NextRun is a run handed to a node in a report's answer.
type NextRun struct {
	Lease HeldLease  `json:"lease"`
	Steps []NodeStep `json:"steps"`
}

// RemovedNode is a node removal's answer.
type RemovedNode struct {
	Reply      `json:"-"`
	NodeID     string `json:"node_id"`
	Released   int    `json:"released"`    // leases released (the node's and its run-mates')
	RunsFailed int    `json:"runs_failed"` // queued runs no remaining node could ever serve
}

// NodeReply is a node as an admin's drain or undrain left it.
type NodeReply struct {
	Reply `json:"-"`
	Node  NodeInfo `json:"node"`
}

// NodeList is the fleet (admins).
type NodeList struct {
	Reply `json:"-"`
	Nodes []NodeInfo `json:"nodes"`
	// Next is the cursor of the page after this one (the after parameter), nil on the last:
	// ListNodes follows it, and answers every page's nodes with Next nil.
	Next *string `json:"next"`
}

// Lease is a node held by a run (GET /v1/leases).
type Lease struct {
	NodeID    string    `json:"node_id"`
	RunID     string    `json:"run_id"`
	Role      string    `json:"role"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	Alive     bool      `json:"alive"`
}

// LeaseList is every lease held (admins).
type LeaseList struct {
	Reply  `json:"-"`
	Leases []Lease `json:"leases"`
}

// QueueEntry is one kind of queued run: its needs, how many wait, for how long, and how many
// nodes could serve them.
type QueueEntry struct {
	Needs       [][]string `json:"needs"`
	Queued      int        `json:"queued"`
	OldestRunID string     `json:"oldest_run_id,omitempty"`
	// OldestRunOwner is its owner, shown to admins.
	OldestRunOwner    string  `json:"oldest_run_owner,omitempty"`
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
	// Priorities are how many wait at each priority, highest first.
	Priorities []PriorityCount `json:"priorities"`
	// CapableNodes could serve one of its roles, live or not; LiveNodes are those live,
	// AvailableNodes those the queue may place on now.
	CapableNodes   int  `json:"capable_nodes"`
	LiveNodes      int  `json:"live_nodes"`
	AvailableNodes int  `json:"available_nodes"`
	PlaceableNow   bool `json:"placeable_now"`
	// Waiting is why the kind's first run waits.
	Waiting *Waiting `json:"waiting,omitempty"`
}

// PriorityCount is how many queued runs of one kind have one priority.
type PriorityCount struct {
	Priority int `json:"priority"`
	Queued   int `json:"queued"`
}

// QueueReply is GET /v1/queue.
type QueueReply struct {
	Reply `json:"-"`
	Queue []QueueEntry `json:"queue"`
	// Fleet is how many nodes there are, and how many of them are live.
	Fleet struct {
		Nodes int `json:"nodes"`
		Live  int `json:"live"`
	} `json:"fleet"`
}

// Health is GET /healthz: the database answers, and its schema is the one the API expects.
type Health struct {
	Reply                 `json:"-"`
	Status                string `json:"status"`
	SchemaVersion         int    `json:"schema_version"`
	ExpectedSchemaVersion int    `json:"expected_schema_version"`
}

// Document is the API's OpenAPI document, as served.
type Document struct {
	Reply `json:"-"`
}

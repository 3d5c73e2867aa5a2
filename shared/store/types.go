package store

import (
	"encoding/json"
	"strings"
	"time"

	"mediator/shared/wire"
)

// Run is a run as clients see it. RunID is the id its owner chose (the run's name): unique
// among that owner's runs, not across owners.
type Run struct {
	RunID string `json:"run_id"`
	// Kind is wire.KindRun, or wire.KindHealthCheck for a check the system placed on a node.
	Kind                string     `json:"kind"`
	State               string     `json:"state"`
	Reason              *string    `json:"reason"`
	Priority            int        `json:"priority"` // 0 to 100, higher first
	Attempt             int        `json:"attempt"`
	MaxAttempts         int        `json:"max_attempts"`
	CreatedAt           time.Time  `json:"created_at"`
	StartedAt           *time.Time `json:"started_at"`
	FinishedAt          *time.Time `json:"finished_at"`
	CancelRequestedAt   *time.Time `json:"cancel_requested_at"`
	CancelReason        *string    `json:"cancel_reason,omitempty"`
	TimeoutSeconds      *int       `json:"timeout_seconds"`
	QueueTimeoutSeconds *int       `json:"queue_timeout_seconds"`
	WaitForCapacity     bool       `json:"wait_for_capacity"`
	// HoldSeconds is a hold's length, and HoldEndsAt, once it is placed, when it ends by
	// KeepOnFailureSeconds: the nodes whose step failed pass to a hold this long when the run
	// settles FAILED step_failed; DebugHold names that hold, and on the hold DebugOf the run it
	// came from (absent when none).
	KeepOnFailureSeconds *int    `json:"keep_on_failure_seconds,omitempty"`
	DebugHold            *string `json:"debug_hold,omitempty"`
	DebugOf              *string `json:"debug_of,omitempty"`
	// itself (both absent for a run of another kind).
	HoldSeconds *int              `json:"hold_seconds,omitempty"`
	HoldEndsAt  *time.Time        `json:"hold_ends_at,omitempty"`
	Roles       map[string]Role   `json:"roles"`
	Steps       []Step            `json:"steps"`
	Assigned    map[string]string `json:"assigned,omitempty"`
	Metadata    json.RawMessage   `json:"metadata"`
	// QueuePosition is how many runs are ahead of a QUEUED run.
	QueuePosition *int `json:"queue_position,omitempty"`
	// Waiting is why a QUEUED run waits, where its reader asked (Store.ExplainWaiting).
	Waiting *WhyWaiting `json:"waiting,omitempty"`
	// Owner and Key are shown to admins only (ShownTo): a client's runs are its own, and a
	// run's key may say that another owner's run has the same name.
	Owner string `json:"owner,omitempty"`
	Key   string `json:"key,omitempty"`

	owner string
	key   string // unique across owners: what nodes, events and logs name the run by
}

// ShownTo is the run as v sees it: with its owner and key for an admin.
func (r Run) ShownTo(v Viewer) Run {
	if v.Admin {
		r.Owner, r.Key = r.owner, r.key
	}
	return r
}

// StoreKey is the run's key, unique across owners.
func (r Run) StoreKey() string { return r.key }

// CheckedNode is the node a health check run checks: the one its role is pinned to ("" for a
// run of another kind).
func (r Run) CheckedNode() string {
	if r.Kind != wire.KindHealthCheck {
		return ""
	}
	for _, need := range r.Roles[wire.HealthCheckRole].Needs {
		if id, ok := strings.CutPrefix(need, wire.NodeIDLabelKey+"="); ok {
			return id
		}
	}
	return ""
}

// Role is one named slot of a run.
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
	// Outputs are what the step reported when it succeeded (null otherwise).
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

// Node is a fleet entry (GET /v1/nodes).
type Node struct {
	NodeID string   `json:"node_id"`
	State  string   `json:"state"` // NodeIdle, NodeLeased, NodeDraining or NodeOffline
	Labels []string `json:"labels"`
	BootID string   `json:"boot_id"`
	// Draining is effective: the node's own drain or an admin's.
	Draining bool `json:"draining"`
	// DrainRequestedBy is the admin who drained the node from outside, if one did.
	DrainRequestedBy *string   `json:"drain_requested_by"`
	LastSeenAt       time.Time `json:"last_seen_at"`
	// Health is healthy, suspect or quarantined (wire.HealthStates); a quarantined node takes
	// no new lease, whatever State says of its advert and lease.
	Health       string  `json:"health"`
	HealthReason *string `json:"health_reason"`
	// InfraFailures counts the consecutive infrastructure failures on the node.
	InfraFailures int       `json:"infra_failures"`
	HealthSince   time.Time `json:"health_since"`
	// QuarantinedBy is self, system or admin:<id> while the node is quarantined.
	QuarantinedBy *string `json:"quarantined_by"`
	// HealthCheckDue: a health check is due on the node, which takes no other work until it ran.
	HealthCheckDue bool `json:"health_check_due"`
	// The run whose lease holds the node (by the id its owner chose), its owner and kind, the
	// role it holds the node for, and since when (all absent on a free node).
	RunID    *string    `json:"run_id,omitempty"`
	RunOwner *string    `json:"run_owner,omitempty"`
	RunKind  *string    `json:"run_kind,omitempty"`
	Role     *string    `json:"role,omitempty"`
	LeasedAt *time.Time `json:"leased_at,omitempty"`
}

// Lease is a node held by a run (GET /v1/leases).
type Lease struct {
	NodeID    string    `json:"node_id"`
	RunID     string    `json:"run_id"`
	Role      string    `json:"role"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// Alive is judged by the lease alone: not expired yet.
	Alive bool `json:"alive"`
}

// LogTarget is where one try of a step keeps its log: the names its keys are built from
// (shared/steplogs). Owner and RunKey name the run across owners; Attempt is the run's,
// Try the step's (steps.tries), Epoch the lease the try runs under.
type LogTarget struct {
	Owner   string
	RunKey  string
	Attempt int
	StepID  string
	Try     int
	Epoch   int64
}

// StepLogFacts are what the database knows of a step's log in one attempt; which chunks exist
// is the bucket's to say.
type StepLogFacts struct {
	RunID   string // the id its owner chose, as the reader named it
	Owner   string
	RunKey  string
	StepID  string
	Attempt int
	// Current: Attempt is the run's latest. Then State, Epoch and Tries are the step's as it
	// stands; for an earlier attempt, State is what its node reported there (CANCELLED when
	// the attempt ended before any report: the run lost a node and was requeued), and Epoch
	// and Tries are not known.
	Current bool
	State   string
	Epoch   *int64
	Tries   int
	// Summary is what the step's terminal report said of its log in that attempt, if one did.
	Summary *LogSummary
}

// LogSummary is a terminal report's word on a step's log, as stored.
type LogSummary struct {
	Bytes    int64
	SHA256   string
	Uploaded bool
}

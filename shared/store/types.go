package store

import (
	"encoding/json"
	"time"
)

// Run states. There are no others: a cancel in progress is RUNNING with CancelRequestedAt set.
// Statements name them as {{QUEUED}} and so on (sql.go): these are their one definition.
const (
	Queued    = "QUEUED"
	Running   = "RUNNING"
	Succeeded = "SUCCEEDED"
	Failed    = "FAILED"
	Cancelled = "CANCELLED"
)

// RunStates are every run state, in the order a run may pass through them.
var RunStates = []string{Queued, Running, Succeeded, Failed, Cancelled}

// Step states beyond the run's.
const (
	Pending = "PENDING"
	Skipped = "SKIPPED"
)

// Node states, as GET /v1/nodes shows them; sql/rules.sql's node_state decides which.
const (
	NodeIdle     = "idle"     // available: a live advert, not draining, no lease
	NodeLeased   = "leased"   // a run holds it
	NodeDraining = "draining" // live, taking no new work
	NodeOffline  = "offline"  // its advert expired
)

// Reasons on FAILED and CANCELLED runs.
const (
	ReasonNoCapableNode = "no_capable_node"
	ReasonTooWide       = "too_wide"
	ReasonStepFailed    = "step_failed"
	ReasonLeaseExpired  = "lease_expired"
	ReasonNodeRestarted = "node_restarted"
	ReasonNodeRemoved   = "node_removed"
	ReasonTimeout       = "timeout"
	ReasonQueueTimeout  = "queue_timeout"
	ReasonCancelled     = "cancelled"
)

// Run is a run as clients see it.
type Run struct {
	RunID               string            `json:"run_id"`
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

	owner string
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

// Terminal reports whether a run or step state is final.
func Terminal(state string) bool {
	switch state {
	case Succeeded, Failed, Cancelled, Skipped:
		return true
	}
	return false
}

// Package wire is what Mediator's API says and takes, in Go: the shapes of its identifiers and
// labels, its limits, the states and reasons it names, and a request as the server reads it.
// It imports nothing but the standard library, so that every side of the API uses the one
// definition: the server's decoders (shared/request) and store, and its clients (shared/client,
// the command line, the agent), which must not link the database to check a label.
// TestWireRulesAreTheSchemasAndTheDocuments pins each rule to the schema's CHECKs and to
// openapi.yaml (pattern, maxLength, maxItems, enum): a change made in one place and not in the
// others fails it.
package wire

import (
	"regexp"
	"strings"
)

// The shapes of what names things.
var (
	// IDPattern is a run_id's, a node_id's and a boot_id's shape.
	IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	// NamePattern is a step id's and a role name's shape.
	NamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	// LabelPattern is a label's: key=value or a bare key.
	LabelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}(=[A-Za-z0-9._:/-]{0,127})?$`)
	// OutputKeyPattern is a step output's key: it becomes part of an environment variable's name
	// on the nodes of the steps that read it.
	OutputKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// The limits of a submission.
const (
	MaxSteps            = 64
	MaxRoles            = 64
	MaxNeeds            = 32 // labels a role may need
	MaxSpecBytes        = 64 << 10
	MaxMetadataBytes    = 16 << 10
	MaxRetries          = 100
	MaxAttempts         = 100
	MaxTimeoutSeconds   = 7 * 86400
	MaxQueueWaitSeconds = 30 * 86400
	// DefaultPriority is a run's priority unless it says otherwise; MaxPriority the highest.
	DefaultPriority = 50
	MaxPriority     = 100
)

// MaxPageSize bounds a page of a list (GET /v1/runs?limit=).
const MaxPageSize = 100

// MaxNodePageSize bounds a page of the fleet (GET /v1/nodes?limit=, its default too), and
// NodePageBytes its JSON: a page ends before the node that would take it past, so that the
// answer stays under Lambda's 6 MB for any labels (64 of up to 192 bytes each) and reasons.
const (
	MaxNodePageSize = 1000
	NodePageBytes   = 4 << 20
)

// MaxLabels bounds a node's advert.
const MaxLabels = 64

// The limits of a step report: past them the report is refused whole (413), since a truncated
// message would be a silent lie about what the step said.
const (
	MaxMessageBytes = 4 << 10
	MaxOutputBytes  = 64 << 10
	MaxOutputsBytes = 4 << 10 // a step's outputs, as compact JSON
	MaxExitCode     = 255
)

// MaxReasonBytes bounds a cancel's reason.
const MaxReasonBytes = 1 << 10

// Step logs. A step's output is stored as numbered chunks, each one object uploaded through a
// presigned PUT URL; a URL is signed before its chunk exists, so it cannot bound the chunk's
// size: the reader does, by ending a log's listing at a chunk larger than LogChunkMaxBytes.
const (
	LogChunkMaxBytes = 4 << 20
	// MaxLogURLs bounds one batch of upload URLs; LogURLsFirstBatch is the batch a started
	// report's answer carries.
	MaxLogURLs        = 64
	LogURLsFirstBatch = 16
	// MaxLogSeq is the largest chunk number: keys carry it as eight digits, so that S3 lists a
	// try's chunks in their order.
	MaxLogSeq = 99_999_999
)

// SHA256Pattern is a log's SHA-256 as reports carry it: lower-case hex.
var SHA256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Run states. There are no others: a cancel in progress is RUNNING with cancel_requested_at
// set.
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

// StepStates are every step state.
var StepStates = []string{Pending, Running, Succeeded, Failed, Cancelled, Skipped}

// FinalRunStates are the states a run ends in; a step may also end SKIPPED.
var FinalRunStates = []string{Succeeded, Failed, Cancelled}

// Final reports whether a run or step state is one it ends in.
func Final(state string) bool {
	switch state {
	case Succeeded, Failed, Cancelled, Skipped:
		return true
	}
	return false
}

// Node states, as the fleet view and a heartbeat's answer show them.
const (
	NodeIdle     = "idle"     // available: a live advert, not draining, no lease
	NodeLeased   = "leased"   // a run holds it
	NodeDraining = "draining" // live, taking no new work
	NodeOffline  = "offline"  // its advert expired
)

// NodeStates are every node state.
var NodeStates = []string{NodeIdle, NodeLeased, NodeDraining, NodeOffline}

// How a node that could serve a queued run's role stands (a run's waiting.roles): each node in
// exactly one, the first that holds of offline (its advert expired), quarantined, draining
// (drained by itself or an admin), held (a hold's lease), checking (a health check's lease, or
// one due on it), busy (another run's lease), available (the queue may place on it now).
// sql/rules.sql capacity_standing is the rule.
const (
	StandingAvailable   = "available"
	StandingBusy        = "busy"
	StandingHeld        = "held"
	StandingChecking    = "checking"
	StandingDraining    = "draining"
	StandingQuarantined = "quarantined"
	StandingOffline     = "offline"
)

// Standings are every standing.
var Standings = []string{StandingAvailable, StandingBusy, StandingHeld, StandingChecking, StandingDraining, StandingQuarantined, StandingOffline}

// Why a QUEUED run waits (its waiting.reason; DESIGN.md, Why a run waits), the most lasting
// cause first: a role the fleet has no node for (the run waits for capacity), a role whose
// every node is offline, a role whose live nodes all are out of scheduling, held or checking,
// a role whose nodes are all busy; then, with a free node for every role, roles that cannot be
// placed at once, free nodes kept for a starving run, free nodes going to runs ahead in queue
// order, and last a run the next wake places (the moment between a node freeing and the wake).
const (
	WaitForCapacity      = "waiting_for_capacity"
	WaitNoLiveNode       = "no_live_node"
	WaitUnavailable      = "unavailable"
	WaitAllBusy          = "all_busy"
	WaitNotAllRoles      = "not_all_roles"
	WaitKeptForProtected = "kept_for_protected"
	WaitQueueAhead       = "queue_ahead"
	WaitPlacing          = "placing"
)

// WaitReasons are every reason, most lasting first.
var WaitReasons = []string{WaitForCapacity, WaitNoLiveNode, WaitUnavailable, WaitAllBusy, WaitNotAllRoles, WaitKeptForProtected, WaitQueueAhead, WaitPlacing}

// A node's health (migration 0015): healthy; suspect once an infrastructure failure counted
// against it; quarantined — taking no new lease — after NODE_QUARANTINE_AFTER consecutive
// ones, a failed health check, its agent's own say or an admin's.
const (
	HealthHealthy     = "healthy"
	HealthSuspect     = "suspect"
	HealthQuarantined = "quarantined"
)

// HealthStates are every health state.
var HealthStates = []string{HealthHealthy, HealthSuspect, HealthQuarantined}

// Who quarantined a node; an admin is "admin:<id>".
const (
	QuarantinedBySelf   = "self"
	QuarantinedBySystem = "system"
)

// A failed report's failure: the test's (the default), or the machine's, which counts
// against the node.
const (
	FailureTest  = "test"
	FailureInfra = "infra"
)

// MaxInfraExitCodes bounds a step spec's infra_exit_codes.
const MaxInfraExitCodes = 32

// MaxUnhealthyBytes bounds a heartbeat's unhealthy reason, and an admin's quarantine reason.
const MaxUnhealthyBytes = 512

// MaxHealthReasonBytes bounds the health_reason a node carries (nodes_health_reason_bounded):
// the system's reasons quote a report's message, truncated to fit.
const MaxHealthReasonBytes = 1024

// A run's kind: a client's run, or a health check the system placed on one node.
const (
	KindRun         = "run"
	KindHealthCheck = "health_check"
	// KindHold is a person's reservation: no steps, a length (hold_seconds).
	KindHold = "hold"
)

// RunKinds are every kind of run.
var RunKinds = []string{KindRun, KindHealthCheck, KindHold}

// DefaultMaxHoldSeconds is MAX_HOLD_SECONDS's default: the longest a hold lasts, and the
// furthest an extend moves its end from now (8 hours).
const DefaultMaxHoldSeconds = 8 * 3600

// MaxHoldSecondsLimit bounds MAX_HOLD_SECONDS itself (30 days).
const MaxHoldSecondsLimit = 30 * 86400

// HealthCheckRole is the one role of a health check's run, pinned to the node it checks.
const HealthCheckRole = "node"

// SystemOwner owns the runs the system places itself: health checks. Only admins see them.
const SystemOwner = "system"

// HealthCheckTimeoutSeconds is a health check run's timeout: a check that hangs fails, and its
// node is quarantined, rather than keeping the node from every other run.
const HealthCheckTimeoutSeconds = 1800

// MaxHealthCheckEverySeconds bounds a health check's every_seconds (a week).
const MaxHealthCheckEverySeconds = 7 * 86400

// NodeIDLabelKey is the implicit label every node carries, node_id=<its id>: a role that
// needs it is pinned to that node. No advert may carry a label of that key itself.
const NodeIDLabelKey = "node_id"

// NodeIDLabel is the implicit label of node id.
func NodeIDLabel(id string) string { return NodeIDLabelKey + "=" + id }

// ImplicitLabel says whether label is of the implicit key, which only the server gives.
func ImplicitLabel(label string) bool {
	return label == NodeIDLabelKey || strings.HasPrefix(label, NodeIDLabelKey+"=")
}

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

// Reasons are every reason.
var Reasons = []string{ReasonNoCapableNode, ReasonTooWide, ReasonStepFailed, ReasonLeaseExpired,
	ReasonNodeRestarted, ReasonNodeRemoved, ReasonTimeout, ReasonQueueTimeout, ReasonCancelled}

// What a node reports of a step.
const (
	ReportStarted   = "started"
	ReportSucceeded = "succeeded"
	ReportFailed    = "failed"
	ReportCancelled = "cancelled"
)

// ReportStatuses are every report status.
var ReportStatuses = []string{ReportStarted, ReportSucceeded, ReportFailed, ReportCancelled}

// A dry run's verdicts.
const (
	Placeable  = "placeable"
	Busy       = "busy"
	Impossible = "impossible"
	TooWide    = "too_wide"
)

package wire

import "encoding/json"

// A request as the server reads it: shared/request decodes and validates a body into one of
// these, and shared/store takes it as it is.

// NewRun is a validated submission.
type NewRun struct {
	RunID               string
	Owner               string // set by the handler from the principal
	Priority            int    // 0 to 100, higher first
	RequestHash         []byte
	Roles               []NewRole // sorted by name
	Steps               []NewStep // in request order
	MaxAttempts         int
	TimeoutSeconds      *int
	QueueTimeoutSeconds *int
	WaitForCapacity     bool
	Metadata            json.RawMessage
	// HoldSeconds makes the run a hold (KindHold): no steps, its nodes leased this long once
	// placed. Nil for a run with steps.
	HoldSeconds *int
}

// Kind is the run's kind as submitted: a hold, or a run.
func (r NewRun) Kind() string {
	if r.HoldSeconds != nil {
		return KindHold
	}
	return KindRun
}

// NewRole is a role and its needs (sorted, no duplicates). Its fields' names are part of a
// stored request's fingerprint: renaming one changes every fingerprint.
type NewRole struct {
	Name  string
	Needs []string
}

// NewStep is a step as submitted; its JSON is part of a stored request's fingerprint.
type NewStep struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	After   []string        `json:"after"`
	Spec    json.RawMessage `json:"spec"`
	Retries int             `json:"retries"`
}

// Heartbeat is a node's advert: PUT /v1/nodes/{node_id}.
type Heartbeat struct {
	NodeID   string
	BootID   string
	Labels   []string // sorted, without duplicates
	Draining bool
	// Unhealthy is why the node's own checks fail ("" when they pass): the node quarantines
	// itself with it, and lifts its own quarantine once it is gone.
	Unhealthy string
}

// Report is a node's report of a step: POST /v1/runs/{run_id}/steps/{step_id}/result.
type Report struct {
	RunID, StepID  string
	NodeID, BootID string
	Epoch          int64
	Status         string // one of ReportStatuses
	ExitCode       *int
	Message        *string
	Output         *string
	// Outputs are a succeeded step's outputs for the steps that wait for it (nil for none).
	Outputs map[string]string
	// Log is what a terminal report says of the step's log in this attempt (nil for nothing).
	Log *LogSummary
	// Failure is a failed report's kind of failure: FailureTest (the default) or FailureInfra,
	// which counts against the node; "" for any other status.
	Failure string
}

// LogSummary is a step's log as its node stored it: its size and SHA-256 (lower-case hex) as
// a reader joins its chunks, and whether every chunk was uploaded.
type LogSummary struct {
	Bytes    int64
	SHA256   string
	Uploaded bool
}

// LogURLs asks for upload URLs for the log of a step the node runs:
// POST /v1/runs/{run_id}/steps/{step_id}/log-urls. From is the first chunk number, Count how
// many (1 to MaxLogURLs).
type LogURLs struct {
	RunID, StepID  string
	NodeID, BootID string
	Epoch          int64
	From, Count    int
}

// HealthCheck is an admin's health check: PUT /v1/health-checks/{name}.
type HealthCheck struct {
	Name  string
	Needs []string // the nodes it applies to
	// Steps are a one-role run's, on role HealthCheckRole.
	Steps        []NewStep
	EverySeconds *int // how often it runs on a node; nil, only when the node's health is in doubt
}

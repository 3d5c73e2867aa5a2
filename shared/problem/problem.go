// Package problem is Mediator's error body: RFC 9457 application/problem+json, with the field
// paths of everything wrong with a request. One table maps each problem code to its status.
//
// A problem never carries SQL, a constraint name, a stack or a file path: its detail is written
// here or by a handler for the client, never copied from an error.
package problem

import (
	"fmt"
	"net/http"
)

// Codes, each with one status and title.
const (
	InvalidRequest       = "invalid_request"
	Unauthenticated      = "unauthenticated"
	Forbidden            = "forbidden"
	NotFound             = "not_found"
	LogsNotStored        = "logs_not_stored"
	RunIDConflict        = "run_id_conflict"
	RunIDAmbiguous       = "run_id_ambiguous"
	StaleAssignment      = "stale_assignment"
	NotRunnable          = "not_runnable"
	ResultConflict       = "result_conflict"
	RunNotLive           = "run_not_live"
	RunNotQueued         = "run_not_queued"
	NotAHold             = "not_a_hold"
	PayloadTooLarge      = "payload_too_large"
	UnsupportedMediaType = "unsupported_media_type"
	Internal             = "internal"
	Unavailable          = "unavailable"
)

var table = map[string]struct {
	status int
	title  string
}{
	InvalidRequest:       {http.StatusBadRequest, "The request is not valid"},
	Unauthenticated:      {http.StatusUnauthorized, "Authentication required"}, // no credentials, or ones not valid
	Forbidden:            {http.StatusForbidden, "Not allowed for this principal"},
	NotFound:             {http.StatusNotFound, "Not found"},
	LogsNotStored:        {http.StatusNotFound, "This stack keeps no step logs"},
	RunIDConflict:        {http.StatusConflict, "The run_id is already used by a different request"},
	RunIDAmbiguous:       {http.StatusConflict, "The run_id names runs of several owners; say whose (owner)"},
	StaleAssignment:      {http.StatusConflict, "The step is not assigned to this node under this lease"},
	NotRunnable:          {http.StatusConflict, "The step cannot take this report in its current state"},
	ResultConflict:       {http.StatusConflict, "The report conflicts with what the step already recorded"},
	RunNotLive:           {http.StatusConflict, "The run has already finished"},
	RunNotQueued:         {http.StatusConflict, "The run is not queued"},
	NotAHold:             {http.StatusConflict, "The run is not a hold"},
	PayloadTooLarge:      {http.StatusRequestEntityTooLarge, "The request, or a field of it, is too large"},
	UnsupportedMediaType: {http.StatusUnsupportedMediaType, "The body must be uncompressed UTF-8 JSON"},
	Internal:             {http.StatusInternalServerError, "Something went wrong on our side"},
	Unavailable:          {http.StatusServiceUnavailable, "The service is temporarily unavailable; try again"},
}

// FieldError is one thing wrong with a request, at a JSON path ("steps[2].after[0]").
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Problem is the error body.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Code      string       `json:"code"`
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
	// Run is carried by run_not_live, so a client learns how its run ended.
	Run any `json:"run,omitempty"`
	// Owners are carried by run_id_ambiguous: the owners of the runs an admin's id names.
	Owners []string `json:"owners,omitempty"`
}

// New is the problem for code, with a detail for the client.
func New(code, detail string) *Problem {
	t, ok := table[code]
	if !ok {
		t, code = table[Internal], Internal
	}
	return &Problem{Type: "/problems/" + code, Title: t.title, Status: t.status, Detail: detail, Code: code}
}

// Invalid is a 400 listing every problem found.
func Invalid(errs []FieldError) *Problem {
	p := New(InvalidRequest, fmt.Sprintf("%d problem(s) with the request; see errors", len(errs)))
	p.Errors = errs
	return p
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// RetryAfterSeconds is the Retry-After every 503 carries.
const RetryAfterSeconds = "1"

// RetryAfter is the Retry-After header the answer carries ("" for none): a 503 is transient by
// definition, so it says when to come back, and clients back off from there.
func (p *Problem) RetryAfter() string {
	if p.Status == http.StatusServiceUnavailable {
		return RetryAfterSeconds
	}
	return ""
}

package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Problem codes the API answers with (the last segment of a problem's type).
const (
	CodeInvalidRequest       = "invalid_request"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeRunIDConflict        = "run_id_conflict"
	CodeStaleAssignment      = "stale_assignment"
	CodeNotRunnable          = "not_runnable"
	CodeResultConflict       = "result_conflict"
	CodeRunNotLive           = "run_not_live"
	CodeNotAHold             = "not_a_hold"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInternal             = "internal"
	CodeUnavailable          = "unavailable"
)

// FieldError is one thing wrong with a request, at its JSON path ("steps[2].after[0]").
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is an answer the API gave instead of what was asked: an RFC 9457 problem, decoded, or
// any other non-success answer (API Gateway's own, a proxy's), described as well as its body
// allows.
type Error struct {
	Method string // the request that got it
	Path   string
	Status int // the HTTP status
	// Code is the last path segment of the problem's type ("/problems/run_not_live" →
	// "run_not_live"); "" when the body was not a problem.
	Code      string
	Type      string
	Title     string
	Detail    string
	RequestID string
	Errors    []FieldError // every field problem of a 400
	// Run is how the run ended, on run_not_live.
	Run *Run
	// RetryAfter is what the answer's Retry-After asked for (0 without one).
	RetryAfter time.Duration
	// Attempts is how many times the request was sent; more than one when this was the last
	// answer of several retried.
	Attempts int
	Body     []byte // as received
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	switch {
	case e.Detail != "" && e.Title != "":
		b.WriteString(": " + e.Title + " (" + e.Detail + ")")
	case e.Detail != "":
		b.WriteString(": " + e.Detail)
	case e.Title != "":
		b.WriteString(": " + e.Title)
	}
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "; %s: %s", fieldPath(f.Path), f.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

func fieldPath(p string) string {
	if p == "" {
		return "(body)"
	}
	return p
}

// TransportError is a request that got no answer: the connection failed, was cut, or the
// attempt timed out — every attempt the retry budget allowed.
type TransportError struct {
	Method   string
	URL      string
	Attempts int
	Elapsed  time.Duration
	Err      error // the last attempt's
}

func (e *TransportError) Error() string {
	s := fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d attempts in %s)", e.Attempts, e.Elapsed.Round(time.Millisecond))
	}
	return s
}

func (e *TransportError) Unwrap() error { return e.Err }

// Unavailable reports whether err means the API could not be reached or could not serve:
// no answer at all, or a 5xx or 429 that outlasted the retries.
func Unavailable(err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return true
	}
	var ae *Error
	return errors.As(err, &ae) && (ae.Status >= 500 || ae.Status == http.StatusTooManyRequests)
}

// HasCode reports whether err is a problem with this code.
func HasCode(err error, code string) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Code == code
}

// NamesField reports whether err is a 400 that finds fault with the request's field at path:
// a field an older API does not know is one ("unknown field").
func NamesField(err error, path string) bool {
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		return false
	}
	for _, f := range ae.Errors {
		if f.Path == path {
			return true
		}
	}
	return false
}

// decodeError turns a non-success answer into an Error. A problem+json body gives every
// field; anything else still gives the status, and a detail from a {"message": ...} body (API
// Gateway's) or the body's text.
func decodeError(method, path string, resp *http.Response, body []byte) *Error {
	e := &Error{Method: method, Path: path, Status: resp.StatusCode, Body: body}
	e.RetryAfter, _ = retryAfter(resp.Header, time.Now())
	var p struct {
		Type      string          `json:"type"`
		Title     string          `json:"title"`
		Detail    string          `json:"detail"`
		Code      string          `json:"code"`
		RequestID string          `json:"request_id"`
		Errors    []FieldError    `json:"errors"`
		Run       json.RawMessage `json:"run"`
		Message   string          `json:"message"`
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if json.Unmarshal(body, &p) == nil && (mt == "application/problem+json" || p.Type != "") {
		e.Type, e.Title, e.Detail, e.RequestID, e.Errors = p.Type, p.Title, p.Detail, p.RequestID, p.Errors
		e.Code = p.Code
		if i := strings.LastIndexByte(p.Type, '/'); p.Type != "" {
			e.Code = p.Type[i+1:]
		}
		if len(p.Run) > 0 && string(p.Run) != "null" {
			var r Run
			if json.Unmarshal(p.Run, &r) == nil {
				e.Run = &r
			}
		}
		return e
	}
	e.Title = http.StatusText(resp.StatusCode)
	switch text := strings.TrimSpace(string(body)); {
	case p.Message != "":
		e.Detail = p.Message
	case text != "":
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		e.Detail = text
	}
	return e
}

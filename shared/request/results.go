package request

import (
	"encoding/json"
	"fmt"
	"math"

	"mediator/shared/problem"
	"mediator/shared/wire"
)

// Result decodes POST /v1/runs/{run_id}/steps/{step_id}/result.
func Result(runID, stepID string, body []byte) (wire.Report, *problem.Problem) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return wire.Report{}, problem.Invalid(errs)
	}
	p := wire.Report{RunID: runID, StepID: stepID, NodeID: id(o, "node_id"), BootID: id(o, "boot_id")}
	if v, ok := o.m["epoch"]; !ok || v == nil {
		o.fail("epoch", "is required")
	}
	p.Epoch, _ = o.integer("epoch", 0, 1, math.MaxInt64)
	if status, ok := o.str("status", true); ok {
		switch status {
		case wire.ReportStarted, wire.ReportSucceeded, wire.ReportFailed, wire.ReportCancelled:
			p.Status = status
		default:
			o.fail("status", "must be one of started, succeeded, failed, cancelled")
		}
	}
	p.ExitCode = exitCode(o, p.Status)
	var tooLarge *problem.Problem
	p.Message, tooLarge = boundedText(o, "message", wire.MaxMessageBytes, tooLarge)
	p.Output, tooLarge = boundedText(o, "output", wire.MaxOutputBytes, tooLarge)
	p.Outputs, tooLarge = outputs(o, p.Status, tooLarge)
	p.Log = logSummary(o, p.Status)
	p.Failure = failure(o, p.Status)
	o.done()
	if len(errs) > 0 {
		return wire.Report{}, problem.Invalid(errs)
	}
	if tooLarge != nil {
		return wire.Report{}, tooLarge
	}
	return p, nil
}

// failure reads a failed report's failure: "test", the default, or "infra" — the machine could
// not run the step, which counts against the node. Only a failed report says either.
func failure(o *object, status string) string {
	f, ok := o.str("failure", false)
	if !ok {
		if status == wire.ReportFailed {
			return wire.FailureTest
		}
		return ""
	}
	switch {
	case f != wire.FailureTest && f != wire.FailureInfra:
		o.fail("failure", "must be one of test, infra")
	case status != "" && status != wire.ReportFailed:
		o.fail("failure", "only a failed report says what failed")
	default:
		return f
	}
	return ""
}

// exitCode reads a report's exit_code, which its status decides: a succeeded step exited 0, a
// failed or cancelled one with a process's exit status (0 to MaxExitCode), and a started one
// has not exited yet, so carries none. Absent (or null) is a report without one, whatever
// the status. A report with no valid status is held to the widest rule.
func exitCode(o *object, status string) *int {
	v, ok := o.get("exit_code", false)
	if !ok {
		return nil
	}
	hi, rule := int64(wire.MaxExitCode), fmt.Sprintf("must be a whole number from 0 to %d (a process's exit status), or absent", wire.MaxExitCode)
	switch status {
	case wire.ReportStarted:
		o.fail("exit_code", "a started report carries no exit_code: the step has not exited yet")
		return nil
	case wire.ReportSucceeded:
		hi, rule = 0, "must be 0, or absent, in a succeeded report: a step that exited otherwise failed"
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil || i < 0 || i > hi {
		o.fail("exit_code", rule)
		return nil
	}
	code := int(i)
	return &code
}

func boundedText(o *object, key string, limit int, prev *problem.Problem) (*string, *problem.Problem) {
	s, ok := o.str(key, false)
	if !ok {
		return nil, prev
	}
	if len(s) > limit {
		if prev == nil {
			prev = problem.New(problem.PayloadTooLarge, fmt.Sprintf("%s must be at most %d bytes", key, limit))
			prev.Errors = []problem.FieldError{{Path: key, Message: fmt.Sprintf("must be at most %d bytes", limit)}}
		}
		return nil, prev
	}
	return &s, prev
}

// outputs reads a succeeded report's outputs: an object of string values under keys in
// outputKeyPattern, at most MaxOutputsBytes of compact JSON (413 above, like a long message).
func outputs(o *object, status string, prev *problem.Problem) (map[string]string, *problem.Problem) {
	v, ok := o.get("outputs", false)
	if !ok {
		return nil, prev
	}
	if status != "" && status != wire.ReportSucceeded {
		o.fail("outputs", "only a succeeded report carries outputs")
		return nil, prev
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		o.fail("outputs", "must be an object of string values")
		return nil, prev
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		s, isStr := val.(string)
		switch {
		case !wire.OutputKeyPattern.MatchString(k):
			o.failAt(join(join(o.path, "outputs"), k), "a key must match "+wire.OutputKeyPattern.String())
		case !isStr:
			o.failAt(join(join(o.path, "outputs"), k), "must be a string")
		default:
			out[k] = s
		}
	}
	if b, _ := json.Marshal(out); len(b) > wire.MaxOutputsBytes && prev == nil {
		prev = problem.New(problem.PayloadTooLarge, fmt.Sprintf("outputs must be at most %d bytes of JSON", wire.MaxOutputsBytes))
		prev.Errors = []problem.FieldError{{Path: "outputs", Message: fmt.Sprintf("must be at most %d bytes of JSON", wire.MaxOutputsBytes)}}
	}
	if len(out) == 0 {
		return nil, prev
	}
	return out, prev
}

// Priority decodes POST /v1/runs/{run_id}/priority: {"priority": 0..100}.
func Priority(body []byte) (int, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return 0, errs
	}
	if v, ok := o.m["priority"]; !ok || v == nil {
		o.fail("priority", "is required")
	}
	priority, _ := o.integer("priority", 0, 0, wire.MaxPriority)
	o.done()
	return int(priority), errs
}

// Cancel decodes POST /v1/runs/{run_id}/cancel: {"reason", "force"}, both optional; an empty
// body is a plain cancel.
func Cancel(body []byte) (reason string, force bool, errs []problem.FieldError) {
	if len(body) == 0 {
		return "", false, nil
	}
	o := root(body, &errs)
	if o == nil {
		return "", false, errs
	}
	reason, _ = o.str("reason", false)
	if len(reason) > wire.MaxReasonBytes {
		o.fail("reason", fmt.Sprintf("must be at most %d bytes", wire.MaxReasonBytes))
	}
	force = o.boolean("force")
	o.done()
	return reason, force, errs
}

// Extend decodes POST /v1/runs/{run_id}/extend: {"seconds"}, how much later the hold ends (1 to
// maxHold).
func Extend(body []byte, maxHold int) (int, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return 0, errs
	}
	if v, ok := o.m["seconds"]; !ok || v == nil {
		o.fail("seconds", "is required")
	}
	seconds, _ := o.integer("seconds", 0, 1, int64(maxHold))
	o.done()
	return int(seconds), errs
}

// Release decodes POST /v1/runs/{run_id}/release, which takes no body: an empty one, or {}.
func Release(body []byte) []problem.FieldError {
	if len(body) == 0 {
		return nil
	}
	var errs []problem.FieldError
	if o := root(body, &errs); o != nil {
		o.done()
	}
	return errs
}

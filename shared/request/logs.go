package request

import (
	"fmt"
	"math"

	"mediator/shared/problem"
	"mediator/shared/wire"
)

// LogURLs decodes POST /v1/runs/{run_id}/steps/{step_id}/log-urls: {"node_id", "boot_id",
// "epoch", "from", "count"}.
func LogURLs(runID, stepID string, body []byte) (wire.LogURLs, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return wire.LogURLs{}, errs
	}
	p := wire.LogURLs{RunID: runID, StepID: stepID, NodeID: id(o, "node_id"), BootID: id(o, "boot_id")}
	for _, key := range []string{"epoch", "from", "count"} {
		if v, ok := o.m[key]; !ok || v == nil {
			o.fail(key, "is required")
		}
	}
	p.Epoch, _ = o.integer("epoch", 0, 1, math.MaxInt64)
	from, fromOK := o.integer("from", 0, 0, wire.MaxLogSeq)
	count, countOK := o.integer("count", 0, 1, wire.MaxLogURLs)
	// A URL past the last chunk number would name a key no reader lists in order.
	if fromOK && countOK && from+count-1 > wire.MaxLogSeq {
		o.fail("count", fmt.Sprintf("from + count - 1 must be at most %d, the last chunk number", wire.MaxLogSeq))
	}
	p.From, p.Count = int(from), int(count)
	o.done()
	if len(errs) > 0 {
		return wire.LogURLs{}, errs
	}
	return p, nil
}

// logSummary reads a terminal report's log: {"bytes", "sha256", "uploaded"}, every field
// required, so that a summary the store keeps never says more than the node did.
func logSummary(o *object, status string) *wire.LogSummary {
	v, ok := o.get("log", false)
	if !ok {
		return nil
	}
	if status == wire.ReportStarted {
		o.fail("log", "only a terminal report (succeeded, failed, cancelled) carries a log: a started step has not finished it")
		return nil
	}
	l := newObject(v, join(o.path, "log"), o.errs)
	if l == nil {
		return nil
	}
	before := len(*o.errs)
	for _, key := range []string{"bytes", "sha256", "uploaded"} {
		if v, ok := l.m[key]; !ok || v == nil {
			l.fail(key, "is required")
		}
	}
	bytes, _ := l.integer("bytes", 0, 0, math.MaxInt64)
	sum, given := l.str("sha256", false)
	if given && !wire.SHA256Pattern.MatchString(sum) {
		l.fail("sha256", "must be a SHA-256 in lower-case hex: 64 characters of 0-9 and a-f")
	}
	uploaded := l.boolean("uploaded")
	l.done()
	if len(*o.errs) > before {
		return nil
	}
	return &wire.LogSummary{Bytes: bytes, SHA256: sum, Uploaded: uploaded}
}

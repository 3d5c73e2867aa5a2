package request_test

// Fuzz targets for every request decoder. Each asserts properties of what the decoder answers,
// not only that it does not panic: a refusal lists problems, each with a message and a path
// shaped like a JSON path; an acceptance is a value the store can take as it is — ids in their
// patterns, limits held, a step graph that can run, JSON that PostgreSQL's jsonb will parse —
// and the same body always decodes to the same answer.
//
// The seed corpus is testdata/fuzz/FuzzXxx/ (`go test ./shared/request/` runs it); explore with
//
//	go test -run XXX -fuzz FuzzSubmit -fuzztime 60s ./shared/request/

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/wire"
)

// labelPattern is a label's shape (DESIGN.md, The model), copied here rather than read from the package, so the
// oracle does not share a typo with the code it checks.
var labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}(=[A-Za-z0-9._:/-]{0,127})?$`)

// Fields each body may carry: anything else accepted would be an unknown field let through.
var (
	submitFields    = fieldSet("run_id", "roles", "needs", "steps", "max_attempts", "timeout_seconds", "queue_timeout_seconds", "wait_for_capacity", "metadata")
	heartbeatFields = fieldSet("boot_id", "labels", "draining")
	resultFields    = fieldSet("node_id", "boot_id", "epoch", "status", "exit_code", "message", "output", "outputs", "log")
	logURLsFields   = fieldSet("node_id", "boot_id", "epoch", "from", "count")
	cancelFields    = fieldSet("reason", "force")
)

func fieldSet(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// checker reports property violations for one body.
type checker struct {
	t     *testing.T
	body  []byte
	facts bodyFacts
}

func newChecker(t *testing.T, body []byte) *checker {
	return &checker{t: t, body: body, facts: scan(body)}
}

func (c *checker) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("body %s: %s", quoteBody(c.body), fmt.Sprintf(format, args...))
}

func quoteBody(b []byte) string {
	if len(b) > 300 {
		return strconv.Quote(string(b[:300])) + fmt.Sprintf("…(%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// problems checks a refusal: at least one problem, each with a message and a JSON path.
func (c *checker) problems(errs []problem.FieldError) {
	c.t.Helper()
	if len(errs) == 0 {
		c.fail("refused with an empty list of problems")
	}
	for _, e := range errs {
		if strings.TrimSpace(e.Message) == "" {
			c.fail("problem at %q has no message", e.Path)
		}
		if !validPath(e.Path) {
			c.fail("problem path %q is not a JSON path", e.Path)
		}
	}
}

// accepted checks what every accepted body shares: it is one valid JSON object with no
// duplicate keys, no absurd nesting, and only the fields the route knows.
func (c *checker) accepted(fields map[string]bool) {
	c.t.Helper()
	if !json.Valid(c.body) {
		c.fail("accepted, but encoding/json says it is not valid JSON")
		return
	}
	if c.facts.dupKey {
		c.fail("accepted with a duplicate key")
	}
	if c.facts.depth > 33 {
		c.fail("accepted with %d levels of nesting", c.facts.depth)
	}
	// encoding/json turns both into U+FFFD: the text stored would not be the text sent.
	if !utf8.Valid(c.body) {
		c.fail("accepted with bytes that are not UTF-8")
	}
	if unpairedSurrogate(c.body) {
		c.fail("accepted with a surrogate escape that has no pair")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(c.body, &top); err != nil {
		c.fail("accepted, but it is not a JSON object: %v", err)
		return
	}
	for k := range top {
		if !fields[k] {
			c.fail("accepted with the unknown field %q", k)
		}
	}
}

// validPath: "" (the whole body), or segments — a name, then `.name`, `[n]` or `["key"]` (the
// bracket form, with a JSON string, being how a key that is not a plain name can be written).
func validPath(p string) bool {
	if p == "" {
		return true
	}
	i, first := 0, true
	for i < len(p) {
		switch {
		case p[i] == '[' && strings.HasPrefix(p[i:], `["`):
			end := closingQuote(p, i+2)
			if end < 0 || end+1 >= len(p) || p[end+1] != ']' {
				return false
			}
			var s string
			if json.Unmarshal([]byte(p[i+1:end+1]), &s) != nil {
				return false
			}
			i = end + 2
		case p[i] == '[':
			j := i + 1
			for j < len(p) && p[j] >= '0' && p[j] <= '9' {
				j++
			}
			if j == i+1 || j >= len(p) || p[j] != ']' || (p[i+1] == '0' && j > i+2) {
				return false
			}
			i = j + 1
		case p[i] == '.' && !first:
			j := nameEnd(p, i+1)
			if j == i+1 {
				return false
			}
			i = j
		case first:
			j := nameEnd(p, i)
			if j == i {
				return false
			}
			i = j
		default:
			return false
		}
		first = false
	}
	return true
}

func nameEnd(p string, i int) int {
	for i < len(p) {
		ch := p[i]
		if ch == '_' || ch == '-' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' {
			i++
			continue
		}
		break
	}
	return i
}

func closingQuote(p string, i int) int {
	for i < len(p) {
		switch p[i] {
		case '\\':
			i += 2
		case '"':
			return i
		default:
			i++
		}
	}
	return -1
}

// unpairedSurrogate reports a \uXXXX escape of a UTF-16 surrogate that is not half of a
// high-then-low pair. It reads each run of consecutive escapes as UTF-16 and asks unicode/utf16
// about it, a different route from the decoder's own scan. (Outside a string a backslash is
// not JSON, so the whole body can be read.)
func unpairedSurrogate(body []byte) bool {
	var run []uint16
	bad := func() bool {
		for i := 0; i < len(run); i++ {
			if !utf16.IsSurrogate(rune(run[i])) {
				continue
			}
			if i+1 < len(run) && utf16.DecodeRune(rune(run[i]), rune(run[i+1])) != utf8.RuneError {
				i++
				continue
			}
			return true
		}
		return false
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' || i+1 >= len(body) {
			if bad() {
				return true
			}
			run = run[:0]
			continue
		}
		if body[i+1] != 'u' || i+6 > len(body) {
			if bad() {
				return true
			}
			run, i = run[:0], i+1 // \\, \", \n...: the escaped character is not an escape
			continue
		}
		u, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil {
			return false // not JSON; the decoder refuses it
		}
		run, i = append(run, uint16(u)), i+5
	}
	return bad()
}

// bodyFacts are what a token walk of the body sees before its first syntax error.
type bodyFacts struct {
	dupKey bool // an object with the same key twice
	depth  int  // the deepest nesting of containers
}

func scan(body []byte) bodyFacts {
	type frame struct {
		obj, wantKey bool
		keys         map[string]bool
	}
	var f bodyFacts
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return f
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, isStr := tok.(string); isStr && top != nil && top.obj && top.wantKey {
			f.dupKey = f.dupKey || top.keys[s]
			top.keys[s], top.wantKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if top != nil && top.obj {
				top.wantKey = true
			}
			stack = append(stack, &frame{obj: tok == json.Delim('{'), wantKey: true, keys: map[string]bool{}})
			f.depth = max(f.depth, len(stack))
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			if top != nil && top.obj {
				top.wantKey = true
			}
		}
	}
}

// storableJSON checks a JSON object the store will cast to jsonb: valid, an object, within
// its size limit, and free of what PostgreSQL refuses — NUL characters, and numbers past
// numeric's range (more than 16383 digits after the point, exponents past ±2^30).
func (c *checker) storableJSON(what string, raw json.RawMessage, limit int) {
	c.t.Helper()
	if !json.Valid(raw) || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		c.fail("%s is not a JSON object: %s", what, raw)
		return
	}
	if len(raw) > limit {
		c.fail("%s is %d bytes, over its limit of %d", what, len(raw), limit)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			c.fail("%s does not tokenize: %v", what, err)
			return
		}
		switch v := tok.(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				c.fail("%s carries a NUL character, which jsonb refuses", what)
			}
		case json.Number:
			if !pgNumeric(string(v)) {
				c.fail("%s carries the number %.60s, which jsonb refuses", what, v)
			}
		}
	}
}

// pgNumeric mirrors PostgreSQL's numeric input (numeric.c, set_var_from_str and make_result):
// the exponent must be within ±(INT_MAX/2) and the digits after the point (those written,
// less the exponent) at most 16383. Magnitudes past float64 are refused by the parser itself.
func pgNumeric(lit string) bool {
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.Atoi(lit[i+1:])
		if err != nil || e >= math.MaxInt32/2 || e <= -(math.MaxInt32/2) {
			return false
		}
		mant, exp = lit[:i], e
	}
	frac := 0
	if j := strings.IndexByte(mant, '.'); j >= 0 {
		frac = len(mant) - j - 1
	}
	return frac-exp <= 16383
}

// ---- Submit ----

func FuzzSubmit(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		checkSubmit(t, body)
	})
}

func checkSubmit(t *testing.T, body []byte) {
	t.Helper()
	c := newChecker(t, body)
	run, errs := request.Submit(body)
	// Stable: the same body decodes to the same run (and hash) or the same problems.
	again, errsAgain := request.Submit(body)
	if !reflect.DeepEqual(run, again) || !reflect.DeepEqual(errs, errsAgain) {
		c.fail("two decodings differ: %+v %v / %+v %v", run, errs, again, errsAgain)
	}
	if errs != nil {
		c.problems(errs)
		if !reflect.DeepEqual(run, wire.NewRun{}) {
			c.fail("refused, yet returned a run: %+v", run)
		}
		return
	}
	c.accepted(submitFields)
	if !wire.IDPattern.MatchString(run.RunID) {
		c.fail("run_id %q does not match %s", run.RunID, wire.IDPattern)
	}
	if run.Owner != "" {
		c.fail("the decoder set the owner %q; only the handler knows it", run.Owner)
	}
	if len(run.RequestHash) != 32 {
		c.fail("request hash of %d bytes", len(run.RequestHash))
	}
	if run.MaxAttempts < 1 || run.MaxAttempts > wire.MaxAttempts {
		c.fail("max_attempts %d", run.MaxAttempts)
	}
	if p := run.TimeoutSeconds; p != nil && (*p < 1 || *p > wire.MaxTimeoutSeconds) {
		c.fail("timeout_seconds %d", *p)
	}
	if p := run.QueueTimeoutSeconds; p != nil && (*p < 1 || *p > wire.MaxQueueWaitSeconds) {
		c.fail("queue_timeout_seconds %d", *p)
	}
	c.storableJSON("metadata", run.Metadata, wire.MaxMetadataBytes)

	roles := map[string]bool{}
	if len(run.Roles) < 1 || len(run.Roles) > wire.MaxRoles {
		c.fail("%d roles", len(run.Roles))
	}
	if !sort.SliceIsSorted(run.Roles, func(i, j int) bool { return run.Roles[i].Name < run.Roles[j].Name }) {
		c.fail("roles are not sorted by name")
	}
	for _, r := range run.Roles {
		if !wire.NamePattern.MatchString(r.Name) || roles[r.Name] {
			c.fail("role name %q is malformed or repeated", r.Name)
		}
		roles[r.Name] = true
		c.labels("role "+r.Name, r.Needs, wire.MaxNeeds)
	}

	if len(run.Steps) < 1 || len(run.Steps) > wire.MaxSteps {
		c.fail("%d steps", len(run.Steps))
	}
	ids := map[string]bool{}
	used := map[string]bool{}
	for _, s := range run.Steps {
		if !wire.NamePattern.MatchString(s.ID) || ids[s.ID] {
			c.fail("step id %q is malformed or repeated", s.ID)
		}
		ids[s.ID] = true
		if !roles[s.Role] {
			c.fail("step %q is on %q, which is no role of the run", s.ID, s.Role)
		}
		used[s.Role] = true
		if s.Retries < 0 || s.Retries > wire.MaxRetries {
			c.fail("step %q has %d retries", s.ID, s.Retries)
		}
		if s.After == nil {
			c.fail("step %q has a nil after (the store writes it as a text[])", s.ID)
		}
		c.storableJSON("spec of "+s.ID, s.Spec, wire.MaxSpecBytes)
	}
	for name := range roles {
		if !used[name] {
			c.fail("role %q has no step", name)
		}
	}
	for _, s := range run.Steps {
		seen := map[string]bool{}
		for _, a := range s.After {
			if !ids[a] || a == s.ID || seen[a] {
				c.fail("step %q waits for %q: unknown, itself or twice", s.ID, a)
			}
			seen[a] = true
		}
	}
	if cyc := cycle(run.Steps); cyc != nil {
		c.fail("the steps %v wait for each other", cyc)
	}
}

func (c *checker) labels(what string, labels []string, limit int) {
	c.t.Helper()
	if labels == nil {
		c.fail("%s: nil labels (the store writes them as a text[])", what)
	}
	if len(labels) > limit {
		c.fail("%s: %d labels, over %d", what, len(labels), limit)
	}
	for i, l := range labels {
		if !labelPattern.MatchString(l) {
			c.fail("%s: label %q does not match the label pattern", what, l)
		}
		if i > 0 && labels[i-1] >= l {
			c.fail("%s: labels not sorted and unique: %q", what, labels)
		}
	}
}

// cycle is the steps that cannot be ordered (Kahn), or nil.
func cycle(steps []wire.NewStep) []string {
	waiting := map[string]int{}
	for _, s := range steps {
		waiting[s.ID] = len(s.After)
	}
	var ready []string
	for _, s := range steps {
		if waiting[s.ID] == 0 {
			ready = append(ready, s.ID)
		}
	}
	for len(ready) > 0 {
		done := ready[0]
		ready = ready[1:]
		for _, s := range steps {
			for _, a := range s.After {
				if a == done {
					if waiting[s.ID]--; waiting[s.ID] == 0 {
						ready = append(ready, s.ID)
					}
				}
			}
		}
	}
	var left []string
	for id, w := range waiting {
		if w > 0 {
			left = append(left, id)
		}
	}
	sort.Strings(left)
	return left
}

// ---- Heartbeat ----

func FuzzHeartbeat(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		checkHeartbeat(t, body)
	})
}

func checkHeartbeat(t *testing.T, body []byte) {
	t.Helper()
	c := newChecker(t, body)
	// The node id comes from the path, already checked by the handler; the decoder keeps it.
	p, errs := request.Heartbeat("node-1", body)
	again, errsAgain := request.Heartbeat("node-1", body)
	if !reflect.DeepEqual(p, again) || !reflect.DeepEqual(errs, errsAgain) {
		c.fail("two decodings differ: %+v %v / %+v %v", p, errs, again, errsAgain)
	}
	if errs != nil {
		c.problems(errs)
		if !reflect.DeepEqual(p, wire.Heartbeat{}) {
			c.fail("refused, yet returned %+v", p)
		}
		return
	}
	c.accepted(heartbeatFields)
	if p.NodeID != "node-1" {
		c.fail("node id %q is not the path's", p.NodeID)
	}
	if !wire.IDPattern.MatchString(p.BootID) {
		c.fail("boot_id %q does not match %s", p.BootID, wire.IDPattern)
	}
	c.labels("labels", p.Labels, wire.MaxLabels)
}

// ---- Result ----

func FuzzResult(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		checkResult(t, body)
	})
}

func checkResult(t *testing.T, body []byte) {
	t.Helper()
	c := newChecker(t, body)
	p, prob := request.Result("run-1", "step-1", body)
	again, probAgain := request.Result("run-1", "step-1", body)
	if !reflect.DeepEqual(p, again) || !reflect.DeepEqual(prob, probAgain) {
		c.fail("two decodings differ: %+v %+v / %+v %+v", p, prob, again, probAgain)
	}
	if prob != nil {
		switch {
		case prob.Code == problem.InvalidRequest && prob.Status == http.StatusBadRequest:
		case prob.Code == problem.PayloadTooLarge && prob.Status == http.StatusRequestEntityTooLarge:
			// 413 only for a message or an output past its limit, in a body otherwise valid.
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			msg, _ := m["message"].(string)
			out, _ := m["output"].(string)
			if len(msg) <= wire.MaxMessageBytes && len(out) <= wire.MaxOutputBytes {
				c.fail("413 with a message of %d bytes and an output of %d", len(msg), len(out))
			}
		default:
			c.fail("refused with %d %s; a decoder answers 400 or 413", prob.Status, prob.Code)
		}
		if prob.Type != "/problems/"+prob.Code || prob.Title == "" {
			c.fail("problem without its type or title: %+v", prob)
		}
		c.problems(prob.Errors)
		if !reflect.DeepEqual(p, wire.Report{}) {
			c.fail("refused, yet returned %+v", p)
		}
		return
	}
	c.accepted(resultFields)
	if p.RunID != "run-1" || p.StepID != "step-1" {
		c.fail("the path's ids were not kept: %q %q", p.RunID, p.StepID)
	}
	if !wire.IDPattern.MatchString(p.NodeID) || !wire.IDPattern.MatchString(p.BootID) {
		c.fail("node_id %q or boot_id %q does not match %s", p.NodeID, p.BootID, wire.IDPattern)
	}
	if p.Epoch < 1 {
		c.fail("epoch %d", p.Epoch)
	}
	switch p.Status {
	case wire.ReportStarted, wire.ReportSucceeded, wire.ReportFailed, wire.ReportCancelled:
	default:
		c.fail("status %q", p.Status)
	}
	if p.ExitCode != nil {
		highest := wire.MaxExitCode
		if p.Status == wire.ReportSucceeded {
			highest = 0
		}
		if p.Status == wire.ReportStarted || *p.ExitCode < 0 || *p.ExitCode > highest {
			c.fail("a %s report with exit_code %d", p.Status, *p.ExitCode)
		}
	}
	c.text("message", p.Message, wire.MaxMessageBytes)
	c.text("output", p.Output, wire.MaxOutputBytes)
	if p.Log != nil {
		if p.Status == wire.ReportStarted {
			c.fail("a started report accepted with a log")
		}
		if p.Log.Bytes < 0 || !sha256Hex.MatchString(p.Log.SHA256) {
			c.fail("a log summary the schema refuses: %+v", *p.Log)
		}
	}
}

// sha256Hex is step_logs_sha256_hex's rule, copied for the same reason as labelPattern.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ---- LogURLs ----

func FuzzLogURLs(f *testing.F) {
	for _, seed := range []string{
		`{"node_id":"n1","boot_id":"b1","epoch":1,"from":0,"count":16}`,
		`{"node_id":"n1","boot_id":"b1","epoch":1,"from":99999990,"count":10}`,
		`{"node_id":"n1","boot_id":"b1","epoch":1,"from":99999990,"count":11}`,
		`{"node_id":"n1","boot_id":"b1","epoch":0,"from":-1,"count":65}`,
		`{"node_id":"n1","boot_id":"b1","epoch":1,"count":1}`,
		`{"node_id":"n1","boot_id":"b1","epoch":1,"from":1.5,"count":"2","extra":true}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := newChecker(t, body)
		p, errs := request.LogURLs("run-1", "step-1", body)
		again, errsAgain := request.LogURLs("run-1", "step-1", body)
		if !reflect.DeepEqual(p, again) || !reflect.DeepEqual(errs, errsAgain) {
			c.fail("two decodings differ: %+v %v / %+v %v", p, errs, again, errsAgain)
		}
		if errs != nil {
			c.problems(errs)
			if !reflect.DeepEqual(p, wire.LogURLs{}) {
				c.fail("refused, yet returned %+v", p)
			}
			return
		}
		c.accepted(logURLsFields)
		if p.RunID != "run-1" || p.StepID != "step-1" || !wire.IDPattern.MatchString(p.NodeID) || !wire.IDPattern.MatchString(p.BootID) {
			c.fail("ids %+v", p)
		}
		if p.Epoch < 1 || p.From < 0 || p.Count < 1 || p.Count > 64 || p.From+p.Count-1 > 99_999_999 {
			c.fail("a batch the keys cannot hold: %+v", p)
		}
	})
}

func (c *checker) text(what string, s *string, limit int) {
	c.t.Helper()
	if s == nil {
		return
	}
	if len(*s) > limit {
		c.fail("%s of %d bytes, over %d", what, len(*s), limit)
	}
	if strings.ContainsRune(*s, 0) || !utf8.ValidString(*s) {
		c.fail("%s %q carries a NUL or invalid UTF-8, which a text column refuses", what, *s)
	}
}

// ---- Cancel ----

func FuzzCancel(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCancel(t, body)
	})
}

func checkCancel(t *testing.T, body []byte) {
	t.Helper()
	c := newChecker(t, body)
	reason, force, errs := request.Cancel(body)
	r2, f2, e2 := request.Cancel(body)
	if reason != r2 || force != f2 || !reflect.DeepEqual(errs, e2) {
		c.fail("two decodings differ: %q %v %v / %q %v %v", reason, force, errs, r2, f2, e2)
	}
	if errs != nil {
		c.problems(errs)
		return
	}
	if len(body) == 0 {
		if reason != "" || force {
			c.fail("an empty body is a plain cancel, not %q force=%v", reason, force)
		}
		return
	}
	c.accepted(cancelFields)
	c.text("reason", &reason, wire.MaxReasonBytes)
}

// ---- Small bodies the properties must hold on, at every test run ----

// TestDecoderRegressions runs the fuzz properties on the smallest bodies that break three of
// them unless the decoders guard against it: on every test run, not only while fuzzing.
func TestDecoderRegressions(t *testing.T) {
	t.Parallel()
	t.Run("an empty status is refused", func(t *testing.T) {
		t.Parallel()
		// "" is not one of the four statuses: let through, the store would write the step's
		// state as '', steps_state_valid would refuse it, and the node would get a 500
		// instead of a 400.
		body := []byte(`{"node_id":"n1","boot_id":"b1","epoch":1,"status":""}`)
		checkResult(t, body)
		if _, prob := request.Result("r", "s", body); prob == nil || !hasPath(prob.Errors, "status") {
			t.Errorf("want a 400 at path status, got %+v", prob)
		}
	})
	t.Run("numbers jsonb cannot store are refused", func(t *testing.T) {
		t.Parallel()
		// A number must fit PostgreSQL's numeric, not only a float64: 1e-20000 rounds to 0
		// without an error from strconv.ParseFloat, and 0e9999999999 is 0, so a float64 check
		// passes both; jsonb refuses them ("value overflows numeric format", SQLSTATE 22003)
		// and POST /v1/runs would answer 500. The fuzzer is unlikely to reach these: coverage
		// does not grow with an exponent's digits.
		for _, tc := range []struct{ body, path string }{
			{`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"k":1e-20000}}]}`, "steps[0].spec.k"},
			{`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"k":0e9999999999}}]}`, "steps[0].spec.k"},
			{`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"metadata":{"k":[1E-99999]}}`, "metadata.k[0]"},
		} {
			checkSubmit(t, []byte(tc.body))
			if _, errs := request.Submit([]byte(tc.body)); !hasPath(errs, tc.path) {
				t.Errorf("%s: want a problem at %s, got %+v", tc.body, tc.path, errs)
			}
		}
	})
	t.Run("keys that are not plain names are quoted in paths", func(t *testing.T) {
		t.Parallel()
		// A client's key goes into a path quoted unless it is a plain name. Appended as it is,
		// an unknown field named "steps[0].id" would be reported at "steps[0].id" (telling the
		// client its step id is wrong), one named "" at "" (the whole body), and keys with
		// spaces or control characters would give paths no reader can split.
		// testdata/fuzz/Fuzz{Submit,Heartbeat,Cancel} keep the fuzzer's inputs of this kind.
		for _, body := range []string{
			`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"steps[0].id":1}`,
			`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"a b":1e999}}]}`,
			`{"run_id":"r","roles":{"a\nb":{"needs":[]}},"steps":[{"id":"s","role":"x"}]}`,
			`{" "`,
		} {
			checkSubmit(t, []byte(body))
		}
		_, errs := request.Submit([]byte(`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"steps[0].id":1}`))
		if hasPath(errs, "steps[0].id") {
			t.Errorf("an unknown top-level field is blamed on steps[0].id: %+v", errs)
		}
		_, errs = request.Submit([]byte(`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"":1}`))
		if hasPath(errs, "") {
			t.Errorf("an unknown field named \"\" is blamed on the whole body: %+v", errs)
		}
	})
}

func hasPath(errs []problem.FieldError, path string) bool {
	for _, e := range errs {
		if e.Path == path {
			return true
		}
	}
	return false
}

// The oracles themselves, so a fuzz failure is the decoder's and not the checker's.
func TestValidPath(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"": true, "run_id": true, "steps[0].after[12]": true, "roles.dut-2.needs[0]": true,
		`steps[0].spec["a b"]`: true, `metadata["x\"y"].k`: true,
		"a b": false, "steps[0]..id": false, ".x": false, "x.": false, "x[01]": false, "x[]": false,
		"steps[0].id\n": false, `x["a]`: false, "[0]": true,
	} {
		if got := validPath(p); got != want {
			t.Errorf("validPath(%q) = %v, want %v", p, got, want)
		}
	}
	for lit, want := range map[string]bool{
		"1": true, "-0.5": true, "1e308": true, "1e-16383": true, "1e-16384": false,
		"0.5e-16383": false, "0e99999": true, "0e9999999999": false, "1E+5": true,
	} {
		if got := pgNumeric(lit); got != want {
			t.Errorf("pgNumeric(%q) = %v, want %v", lit, got, want)
		}
	}
	for body, want := range map[string]bool{
		`"\ud83d\ude00"`: false, `"\uD83D\uDE00"`: false, `"\\ud800"`: false, `"\u00e9\ufffd"`: false, `"a\\"`: false,
		`"\ud800"`: true, `"\udc00"`: true, `"\ud83dx\ude00"`: true, `"\ud83d\n\ude00"`: true, `"\ude00\ud83d"`: true,
		`"\\\ud800"`: true, `"\ud83d\ude00\udc00"`: true, `{"\ud800":1}`: true,
	} {
		if got := unpairedSurrogate([]byte(body)); got != want {
			t.Errorf("unpairedSurrogate(%s) = %v, want %v", body, got, want)
		}
	}
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	neturl "net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// How --follow polls the log route: every second after something new came, backing off to
// an agent's default flush interval (LOG_FLUSH_SECONDS, 2 s) while nothing does. A line is then
// shown at most a flush and a poll after the step printed it — well within the 5 s DESIGN.md
// promises. Each poll is a read of the run and one of each running step's log.
const (
	logPollMin = time.Second
	logPollMax = 2 * time.Second
)

func logsCommand(a *app) *cobra.Command {
	var owner string
	var attempt int
	var follow bool
	cmd := &cobra.Command{
		Use:     "logs RUN_ID [STEP_ID] [--attempt N] [-f|--follow] [--owner O]",
		Short:   "Print a step's log, or every step's of a run; --follow prints it as it grows",
		GroupID: "runs",
		Long: `Print the log of a step as it stands — on a running step, everything its node uploaded so
far — or, without STEP_ID, the log of every step of the run, in the run's order, each under a
header "==> step ID, attempt N: STATE <==". A log is the step's combined output as its node
stored it (the node keeps the whole of it too), every try of the attempt in order; --attempt
picks an attempt (default the run's latest).

Piped or redirected, the log is written byte for byte; on a terminal, what a terminal would
act on (escapes, carriage returns) is shown escaped, as \x1b, so that a step cannot rewrite the
screen. A complete log — the step ended and its node stored all of it — is checked against
the SHA-256 its node reported: a mismatch is an error (exit 1).

--follow prints what exists, then the new output as it arrives (polling every one to two
seconds), until the step — without STEP_ID, the run — ends, and exits as submit --wait does: 0
SUCCEEDED, 1 FAILED (or SKIPPED), 2 CANCELLED; with STEP_ID, as that step ended. Following
several steps, a header says whose output follows whenever it changes.

A log past LOG_MAX_BYTES_PER_STEP keeps its beginning and its end: a marker line says how many
bytes were left out between. While such a step runs, its newest output is read from a live
tail, which --follow prints as it changes.

` + exitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("%s takes the run id, and optionally a step id", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if attempt < 0 || attempt > wire.MaxAttempts {
				return usagef("--attempt must be from 1 to %d", wire.MaxAttempts)
			}
			step := ""
			if len(args) == 2 {
				step = args[1]
			}
			if a.json() && (step == "" || follow) {
				return usagef("--output json prints the log route's answer (its chunks' URLs) for one step: give STEP_ID, without --follow")
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			api = forOwner(api, owner)
			if a.json() {
				sl, err := api.StepLog(cmd.Context(), args[0], step, client.StepLogParams{Attempt: attempt})
				if err != nil {
					return err
				}
				writeBody(a.stdout, sl.Body)
				return nil
			}
			s := a.logSession(api, args[0], step == "")
			defer s.out.end()
			if !follow {
				return s.print(cmd.Context(), step, attempt)
			}
			state, err := s.follow(cmd.Context(), step, attempt)
			if err != nil {
				return err
			}
			return exitWith(outcome(state))
		},
	}
	cmd.Flags().IntVar(&attempt, "attempt", 0, "the run's attempt whose log to print (default the latest)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print new output as it arrives, until the step (or the run) ends; exit as it ended")
	ownerFlag(cmd, &owner)
	return cmd
}

// followLogs follows a run submitted with --wait --logs: its steps' logs as they run, then
// the run as it ended, in the line --wait ends with.
func (a *app) followLogs(ctx context.Context, api *client.Client, run client.Run) (*client.RunDetail, error) {
	if run.Owner != "" { // an admin's run: its id may be another owner's too
		api = api.ForOwner(run.Owner)
	}
	s := a.logSession(api, run.RunID, true)
	began := a.now()
	_, err := s.follow(ctx, "", 0)
	s.out.end()
	if err != nil {
		return nil, err
	}
	d, err := api.GetRun(ctx, run.RunID)
	if err != nil {
		return nil, err
	}
	if s.out.any {
		fmt.Fprintln(a.stdout)
	}
	fmt.Fprintln(a.stdout, describe(d.Run, a.colour(a.stdoutTTY))+" · "+elapsed(a.now().Sub(began)))
	return d, nil
}

// errNoLogs: the stack was deployed without a log bucket.
var errNoLogs = &exitError{code: exitFailed, err: errors.New("this stack keeps no step logs (it has no log bucket): a step's output is on its node, under the agent's --work-dir/output")}

// logSession reads the logs of one run and writes them to stdout.
type logSession struct {
	a       *app
	api     *client.Client
	runID   string
	get     logFetch
	out     *logOut
	streams map[string]*logStream // by step and attempt
}

func (a *app) logSession(api *client.Client, runID string, headers bool) *logSession {
	out := &logOut{w: a.stdout, headers: headers, nl: true}
	if a.stdoutTTY {
		out.vis = &visibleWriter{w: a.stdout}
	}
	return &logSession{a: a, api: api, runID: runID, get: httpFetch(&http.Client{Timeout: 2 * time.Minute}), out: out,
		streams: map[string]*logStream{}}
}

func (s *logSession) stream(step string, attempt int) *logStream {
	key := fmt.Sprintf("%s/%d", step, attempt)
	if s.streams[key] == nil {
		s.streams[key] = &logStream{key: key, step: step, attempt: attempt, get: s.get, h: sha256.New()}
	}
	return s.streams[key]
}

// print writes one step's log as it stands, or every step's under a header each.
func (s *logSession) print(ctx context.Context, step string, attempt int) error {
	steps := []string{step}
	if step == "" {
		d, err := s.api.GetRun(ctx, s.runID)
		if err != nil {
			return err
		}
		steps = steps[:0]
		for _, st := range d.Run.Steps {
			steps = append(steps, st.ID)
		}
	}
	for _, id := range steps {
		sl, err := s.api.StepLog(ctx, s.runID, id, client.StepLogParams{Attempt: attempt})
		if err != nil {
			return err
		}
		if !sl.Stored {
			return errNoLogs
		}
		ls := s.stream(id, sl.Attempt)
		s.out.begin(ls.key, logHeader(id, sl.Attempt, sl.State))
		if _, err := s.read(ctx, ls, sl); err != nil {
			return err
		}
		if wire.Final(sl.State) {
			if err := s.finish(ls, sl); err != nil {
				return err
			}
		}
	}
	return nil
}

// follow prints the logs as they grow until the step (or, for "", every step and the run) is
// final, and says the final state of what it followed.
func (s *logSession) follow(ctx context.Context, only string, attempt int) (string, error) {
	every := logPollMin
	done := map[string]string{} // step/attempt → the state its log ended in
	for {
		d, err := s.api.GetRun(ctx, s.runID)
		if err != nil {
			return "", err
		}
		run := d.Run
		if only != "" && !slices.ContainsFunc(run.Steps, func(st client.Step) bool { return st.ID == only }) {
			return "", usagef("run %s has no step %s", visible(s.runID), visible(only))
		}
		pinnedOver := attempt > 0 && run.Attempt > attempt // that attempt can change no more
		changed, left := false, 0
		var state string
		for _, st := range run.Steps {
			if only != "" && st.ID != only {
				continue
			}
			at := cmp.Or(attempt, run.Attempt)
			key := fmt.Sprintf("%s/%d", st.ID, at)
			state = st.State
			if end, ok := done[key]; ok {
				state = end
				continue
			}
			if attempt == 0 && st.StartedAt == nil {
				// Not started in this attempt: no log yet, or never (skipped, cancelled).
				if !wire.Final(st.State) {
					left++
				}
				continue
			}
			var from int64 // where this attempt's log was read to
			if ls := s.streams[key]; ls != nil {
				from = ls.off
			}
			sl, err := s.api.StepLog(ctx, s.runID, st.ID, client.StepLogParams{Attempt: attempt, From: from})
			if err != nil {
				return "", err
			}
			if !sl.Stored {
				return "", errNoLogs
			}
			ls := s.stream(st.ID, sl.Attempt)
			n, err := s.read(ctx, ls, sl)
			if err != nil {
				return "", err
			}
			changed = changed || n > 0
			if wire.Final(sl.State) {
				if err := s.finish(ls, sl); err != nil {
					return "", err
				}
			}
			if sl.Attempt == at && (wire.Final(sl.State) || pinnedOver) {
				done[key], state = sl.State, sl.State
				continue
			}
			left++ // running, or the run went on to another attempt since it was read
		}
		switch {
		case only != "" && left == 0:
			return state, nil
		case only == "" && left == 0 && wire.Final(run.State):
			return run.State, nil
		}
		if changed {
			every = logPollMin
		} else {
			every = min(every*3/2, logPollMax)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// read prints what is new in ls's log as sl lists it, reading the log route again, from where
// it got to, for the next page of a long log and when the chunks' URLs expired on the way (they
// live minutes; a large log may take longer). sl ends as the last answer read, and it says
// how many bytes it printed.
func (s *logSession) read(ctx context.Context, ls *logStream, sl *client.StepLog) (int, error) {
	printed, stuck := 0, 0
	for {
		before := ls.off
		data, err := ls.advance(ctx, sl)
		s.out.write(ls.key, logHeader(ls.step, ls.attempt, ""), data)
		printed += len(data)
		switch {
		case errors.Is(err, errURLExpired):
			if ls.off == before {
				stuck++
			}
			if stuck >= 3 {
				return printed, err
			}
		case err != nil, !sl.More, ls.off == before:
			return printed, err
		}
		next, err := s.api.StepLog(ctx, s.runID, ls.step, client.StepLogParams{Attempt: ls.attempt, From: ls.off})
		if err != nil {
			return printed, err
		}
		*sl = *next
	}
}

// finish ends a step's log once the step is final: what was held back past a live tail, then
// the check of a complete log against its node's SHA-256.
func (s *logSession) finish(ls *logStream, sl *client.StepLog) error {
	s.out.write(ls.key, logHeader(ls.step, ls.attempt, ""), ls.endLive())
	if err := ls.verify(sl); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if !sl.Complete && len(sl.Chunks) > 0 {
		fmt.Fprintf(s.a.stderr, "mediator: the log of step %s (attempt %d) is not complete: its node did not store all of it "+
			"(the step's message says why; the node keeps the whole)\n", visible(ls.step), ls.attempt)
	}
	return nil
}

// logHeader is the line above a step's log when several are printed: with the step's state
// when printed as it stands, without when followed.
func logHeader(step string, attempt int, state string) string {
	h := fmt.Sprintf("==> step %s, attempt %d", visible(step), attempt)
	if state != "" {
		h += ": " + visible(state)
	}
	return h + " <=="
}

// logFetch reads one object of a log through its presigned URL.
type logFetch func(ctx context.Context, url string) ([]byte, error)

// errURLExpired: S3 refused a presigned URL (403), past its few minutes.
var errURLExpired = errors.New("the log's URL expired")

// errNoObject: S3 has no such object (404): a live tail rewritten or removed between the
// listing and the read.
var errNoObject = errors.New("reading the log: S3 has no such object")

// httpFetch GETs a presigned URL, no credentials of ours, trying again after a connection
// that failed or a 5xx.
func httpFetch(hc *http.Client) logFetch {
	return func(ctx context.Context, url string) ([]byte, error) {
		var last error
		for try := range 4 {
			if try > 0 {
				t := time.NewTimer(time.Duration(250<<try) * time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, ctx.Err()
				case <-t.C:
				}
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return nil, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				last = err
				if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
					last = ue.Err // not the URL: it reads the object for minutes
				}
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusForbidden:
				return nil, errURLExpired
			case resp.StatusCode == http.StatusNotFound:
				return nil, errNoObject
			case resp.StatusCode >= 500 || err != nil:
				last = cmp.Or(err, fmt.Errorf("S3 answered %d", resp.StatusCode))
				continue
			case resp.StatusCode != http.StatusOK:
				return nil, fmt.Errorf("reading the log: S3 answered %d", resp.StatusCode)
			}
			return body, nil
		}
		return nil, fmt.Errorf("reading the log: %w", last)
	}
}

// logStream is one step's log of one attempt as read so far: the chunks in order, hashed, and
// what of a capped try's live tail was shown.
type logStream struct {
	key, step string
	attempt   int
	get       logFetch
	off       int64     // the log's bytes read so far
	h         hash.Hash // of those bytes
	live      *liveView
}

// liveView is a capped try whose live tail was printed.
type liveView struct {
	try   int
	shown []byte // the end of what was printed of it, at most keepShown
	after []byte // the try's chunks past its head, read since: its marker and its tail
}

// keepShown bounds what is kept of a live tail's printed end to find where the next read of it
// resumes.
const keepShown = 64 << 10

func (v *liveView) remember(b []byte) {
	v.shown = append(v.shown, b...)
	if len(v.shown) > keepShown {
		v.shown = slices.Clone(v.shown[len(v.shown)-keepShown:])
	}
}

// advance reads the chunks sl lists past what was read, in order, and returns what to print.
// A gap in the listing (a chunk not yet listed) ends the read there; the next listing goes on
// from it. A capped try whose live tail was shown holds its later chunks (marker and tail)
// back: they repeat what the live tail showed, and endLive prints only what is new.
func (s *logStream) advance(ctx context.Context, sl *client.StepLog) ([]byte, error) {
	chunks := slices.Clone(sl.Chunks)
	slices.SortStableFunc(chunks, func(a, b client.LogChunk) int { return cmp.Compare(a.Offset, b.Offset) })
	var out []byte
	all := true
	for _, c := range chunks {
		end := c.Offset + c.Bytes
		switch {
		case end <= s.off && c.Bytes > 0, c.Bytes == 0 && c.Offset < s.off:
			continue // read before
		case c.Offset < s.off:
			return out, fmt.Errorf("the log of step %s changed under the reader: chunk %d of try %d at offset %d, %d bytes read",
				visible(s.step), c.Seq, c.Try, c.Offset, s.off)
		case c.Offset > s.off:
			all = false
		}
		if !all {
			break
		}
		data, err := s.get(ctx, c.URL)
		if err != nil {
			return out, err
		}
		if int64(len(data)) != c.Bytes {
			return out, fmt.Errorf("the log of step %s: chunk %d of try %d holds %d bytes, listed as %d",
				visible(s.step), c.Seq, c.Try, len(data), c.Bytes)
		}
		s.h.Write(data)
		s.off = end
		if v := s.live; v != nil {
			if v.try == c.Try {
				v.after = append(v.after, data...)
				continue
			}
			out = append(out, s.endLive()...)
		}
		out = append(out, data...)
	}
	if all && sl.Live != nil && !wire.Final(sl.State) {
		data, err := s.showLive(ctx, sl.Live)
		out = append(out, data...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Notices written into a log where what is printed is not the stored log byte for byte.
const (
	liveNotice = "\n=== mediator: the log passed LOG_MAX_BYTES_PER_STEP; its newest output follows, from its live tail ===\n"
	gapNotice  = "\n=== mediator: more output came between two reads than the live tail holds; some of it is not shown here ===\n"
)

// showLive prints what is new in a capped try's live tail: the newest output, which no chunk
// holds while the try runs. The tail is rewritten whole at each flush, so what is new is what
// follows the end of what was printed of it.
func (s *logStream) showLive(ctx context.Context, lt *client.LiveTail) ([]byte, error) {
	data, err := s.get(ctx, lt.URL)
	if errors.Is(err, errNoObject) {
		return nil, nil // the try ended since the listing: its tail is in its chunks now
	}
	if err != nil {
		return nil, err
	}
	var out []byte
	if s.live == nil || s.live.try != lt.Try {
		out = append(out, s.endLive()...)
		s.live = &liveView{try: lt.Try}
		out = append(out, liveNotice...)
		out = append(out, data...)
		s.live.remember(data)
		return out, nil
	}
	rest, ok := resume(s.live.shown, data)
	if !ok {
		out = append(out, gapNotice...)
	}
	out = append(out, rest...)
	s.live.remember(rest)
	return out, nil
}

// endLive ends a live view: of the try's marker and tail, what the live tail did not show.
func (s *logStream) endLive() []byte {
	v := s.live
	s.live = nil
	if v == nil || len(v.after) == 0 {
		return nil
	}
	if rest, ok := resume(v.shown, capMarker.ReplaceAll(v.after, nil)); ok {
		return rest
	}
	return v.after // where the live view ended cannot be told: the marker, then the whole tail
}

// capMarker is the line an agent stores where a capped try's output was left out.
var capMarker = regexp.MustCompile(`^\n=== mediator: [0-9]+ bytes of output left out here \(LOG_MAX_BYTES_PER_STEP\); the last [0-9]+ bytes follow ===\n`)

// anchorBytes is how much of what was shown must be found again in a new read to resume after
// it; a shorter overlap is found by its longest match at the boundary.
const anchorBytes = 4 << 10

// resume is what of cur follows what was shown, when cur is a later window of the same output
// (a live tail read again, or the tail stored at the end). The end of shown is looked for in
// cur, its last occurrence: in output that repeats itself that skips what repeats, rather than
// print again megabytes already shown. false: cur does not meet shown, and follows a gap.
func resume(shown, cur []byte) ([]byte, bool) {
	if len(shown) == 0 {
		return cur, false
	}
	anchor := shown[max(len(shown)-anchorBytes, 0):]
	if i := bytes.LastIndex(cur, anchor); i >= 0 {
		return cur[i+len(anchor):], true
	}
	if k := overlap(anchor, cur); k >= min(64, len(cur), len(anchor)) && k > 0 {
		return cur[k:], true
	}
	return cur, false
}

// overlap is the length of the longest suffix of a that is a prefix of b (Knuth–Morris–Pratt
// over b's prefix, as long as a at most).
func overlap(a, b []byte) int {
	p := b[:min(len(a), len(b))]
	if len(p) == 0 {
		return 0
	}
	fail := make([]int, len(p))
	for i, k := 1, 0; i < len(p); i++ {
		for k > 0 && p[i] != p[k] {
			k = fail[k-1]
		}
		if p[i] == p[k] {
			k++
		}
		fail[i] = k
	}
	k := 0
	for i := range a {
		for k > 0 && (k == len(p) || a[i] != p[k]) {
			k = fail[k-1]
		}
		if a[i] == p[k] {
			k++
		}
	}
	return k
}

// verify checks a complete log — the step final, every chunk stored — against what its node
// said it stored: the bytes read must be its size and its SHA-256.
func (s *logStream) verify(sl *client.StepLog) error {
	if !sl.Complete || sl.SHA256 == nil {
		return nil
	}
	got := hex.EncodeToString(s.h.Sum(nil))
	if sl.Bytes != nil && *sl.Bytes != s.off {
		return fmt.Errorf("the log of step %s (attempt %d) is %d bytes as read, but its node stored %d", visible(s.step), s.attempt, s.off, *sl.Bytes)
	}
	if !strings.EqualFold(got, *sl.SHA256) {
		return fmt.Errorf("the log of step %s (attempt %d) does not match its SHA-256: read %s, its node stored %s",
			visible(s.step), s.attempt, got, visible(*sl.SHA256))
	}
	return nil
}

// logOut writes logs to stdout: byte for byte, or, on a terminal, visible; with headers when
// several steps' logs are written, one whenever the step whose output follows changes.
type logOut struct {
	w       io.Writer
	vis     *visibleWriter // on a terminal
	headers bool
	cur     string // whose output was written last
	any     bool   // anything was written
	nl      bool   // what was written ends a line
}

// begin starts key's output under its header, unless it is the output being written.
func (o *logOut) begin(key, header string) {
	if !o.headers || key == o.cur {
		return
	}
	o.flush()
	if o.any {
		if !o.nl {
			io.WriteString(o.w, "\n")
		}
		io.WriteString(o.w, "\n")
	}
	io.WriteString(o.w, header+"\n")
	o.cur, o.any, o.nl = key, true, true
}

func (o *logOut) write(key, header string, data []byte) {
	if len(data) == 0 {
		return
	}
	o.begin(key, header)
	if o.vis != nil {
		_, _ = o.vis.Write(data)
	} else {
		_, _ = o.w.Write(data)
	}
	o.any, o.nl = true, data[len(data)-1] == '\n'
}

func (o *logOut) flush() {
	if o.vis != nil {
		o.vis.Flush()
	}
}

// end flushes what is held back; on a terminal, the prompt then starts on a line of its own.
func (o *logOut) end() {
	o.flush()
	if o.vis != nil && o.any && !o.nl {
		io.WriteString(o.w, "\n")
	}
}

// visibleWriter writes a stream visible, as visibleLines does a message (newlines and tabs
// kept, a CRLF read as a newline), across writes that may cut a character or a CRLF in two:
// what the next write may complete is held back until it comes, or until Flush.
type visibleWriter struct {
	w    io.Writer
	held []byte
}

func (v *visibleWriter) Write(p []byte) (int, error) {
	b := append(v.held, p...)
	k := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				k = i
			}
			break
		}
	}
	if k == len(b) && k > 0 && b[k-1] == '\r' {
		k--
	}
	v.held = slices.Clone(b[k:])
	_, err := io.WriteString(v.w, escape(strings.ReplaceAll(string(b[:k]), "\r\n", "\n"), true))
	return len(p), err
}

// Flush writes what was held back.
func (v *visibleWriter) Flush() {
	if len(v.held) > 0 {
		_, _ = io.WriteString(v.w, escape(string(v.held), true))
		v.held = nil
	}
}

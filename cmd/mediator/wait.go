package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// How --wait polls: the API has no push, so the run is read again soon after it changed and
// less often while it does not, which follows short steps closely and costs a long run one
// read every couple of seconds. Each read is a client call, with its retries: an outage
// shorter than the retry budget is ridden over.
const (
	pollFirst = 250 * time.Millisecond
	pollMax   = 2 * time.Second
	redraw    = time.Second // a live status line's elapsed time ticks this often
)

// follow reads the run until it is finished, showing its progress: on a terminal, one status
// line redrawn in place; elsewhere (a CI log, a pipe) one line per change, none lost between
// two reads: the run's history and its steps' end times say what happened since the last
// read, in order. With --output json the progress goes to stderr, and only when that is a
// terminal: stdout is for the API's JSON.
func (a *app) follow(ctx context.Context, api *client.Client, run client.Run) (*client.RunDetail, error) {
	return a.followUntil(ctx, api, run, func(r client.Run) bool { return wire.Final(r.State) })
}

// followUntil is follow up to the first read of the run for which done holds (a hold waits
// only for its placement), or its end.
func (a *app) followUntil(ctx context.Context, api *client.Client, run client.Run, done func(client.Run) bool) (*client.RunDetail, error) {
	if run.Owner != "" { // an admin's run: its id may be another owner's too
		api = api.ForOwner(run.Owner)
	}
	s := a.statusLine(run)
	began := a.now()
	var detail *client.RunDetail
	if s.live {
		s.show(run, 0)
	}
	every := pollFirst
	poll := time.NewTimer(every)
	defer poll.Stop()
	var tick <-chan time.Time
	if s.live {
		t := time.NewTicker(redraw)
		defer t.Stop()
		tick = t.C
	}
	for !done(run) && !wire.Final(run.State) {
		select {
		case <-ctx.Done():
			s.end()
			return nil, ctx.Err()
		case <-tick:
			s.show(run, a.now().Sub(began))
		case <-poll.C:
			d, err := api.GetRun(ctx, run.RunID)
			if err != nil {
				s.end()
				return nil, err
			}
			if progress(d.Run) != progress(run) {
				every = pollFirst
			} else {
				every = min(every*3/2, pollMax)
			}
			run, detail = d.Run, d
			if s.live {
				s.show(run, a.now().Sub(began))
			} else {
				s.changes(d, a.now().Sub(began))
			}
			poll.Reset(every)
		}
	}
	s.end()
	if detail == nil { // done before the first read: the history comes with a read
		var err error
		if detail, err = api.GetRun(ctx, run.RunID); err != nil {
			return nil, err
		}
	}
	return detail, nil
}

// progress is what a status line shows of a run, but the time: a change in it is a change.
func progress(r client.Run) string {
	return fmt.Sprintf("%s|%s|%s|%d/%d|%d|%v|%s", r.State, r.ReasonText(), position(r), r.StepsDone(),
		len(r.Steps), r.Attempt, r.CancelRequestedAt != nil, roles(r.Assigned))
}

// status is where --wait shows progress.
type status struct {
	w      io.Writer // nil: nowhere
	live   bool      // a terminal: one line, redrawn
	colour bool
	drawn  bool

	// Lines, one per change, remember what they said: the history events shown (the first,
	// the submission, is the submit's own answer), the step ends shown (by attempt, step and
	// try), and the queue position.
	shownHistory int
	shownEnds    map[string]bool
	shownAt      string
}

func (a *app) statusLine(r client.Run) *status {
	s := &status{shownHistory: 1, shownEnds: map[string]bool{}, shownAt: position(r)}
	switch {
	case !a.json():
		s.w, s.live, s.colour = a.stdout, a.stdoutTTY, a.colour(a.stdoutTTY)
	case a.stderrTTY:
		s.w, s.live, s.colour = a.stderr, true, a.colour(true)
	}
	return s
}

// show draws the run's status line in place.
func (s *status) show(r client.Run, took time.Duration) {
	if s.w == nil {
		return
	}
	fmt.Fprint(s.w, "\r\x1b[K"+describe(r, s.colour)+" · "+elapsed(took))
	s.drawn = true
}

// end leaves the live line where it is and moves to the next.
func (s *status) end() {
	if s.live && s.drawn {
		fmt.Fprintln(s.w)
		s.drawn = false
	}
}

// change is one line of changes: when it happened by the API's clock, for the order.
type change struct {
	at   time.Time
	step bool // a step's end goes before a change of the run at the same instant: it caused it
	line string
}

// changes prints what changed in the run since the last read, one line each, in the order it
// happened: its history's new events, its steps' ends, a new queue position, and at the end
// the run's final status. Each line is said once, so that however often the run is read, the
// lines are the same. took is when this read saw them.
func (s *status) changes(d *client.RunDetail, took time.Duration) {
	if s.w == nil {
		return
	}
	r := d.Run
	var out []change
	for _, e := range d.History[min(s.shownHistory, len(d.History)):] {
		if !wire.Final(e.To) { // the run's final status line says it
			out = append(out, change{at: e.At, line: s.eventLine(r, e)})
		}
	}
	s.shownHistory = max(s.shownHistory, len(d.History))
	for _, st := range r.Steps {
		key := fmt.Sprintf("%d/%s/%d", r.Attempt, st.ID, st.Tries)
		if !wire.Final(st.State) || st.FinishedAt == nil || s.shownEnds[key] {
			continue
		}
		s.shownEnds[key] = true
		line := fmt.Sprintf("run %s: step %s %s", visible(r.RunID), visible(st.ID), colourState(s.colour, st.State))
		if st.State == wire.Failed && st.ExitCode != nil {
			line += fmt.Sprintf(" (exit %d)", *st.ExitCode)
		}
		out = append(out, change{at: *st.FinishedAt, step: true, line: line + stepsAt(r, *st.FinishedAt)})
	}
	slices.SortStableFunc(out, func(a, b change) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		if a.step != b.step {
			if a.step {
				return -1
			}
			return 1
		}
		return 0
	})
	if r.State == wire.Queued && position(r) != s.shownAt {
		out = append(out, change{line: describe(r, s.colour)})
	}
	s.shownAt = position(r)
	if wire.Final(r.State) {
		out = append(out, change{line: describe(r, s.colour)})
	}
	for _, c := range out {
		fmt.Fprintln(s.w, c.line+" · "+elapsed(took))
	}
}

// eventLine is one event of a run's history: "run b: QUEUED → RUNNING (promoted)",
// "run b: RUNNING (cancel_requested)", with the steps done at that moment.
func (s *status) eventLine(r client.Run, e client.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: ", visible(r.RunID))
	if e.From != nil && *e.From != e.To {
		b.WriteString(colourState(s.colour, *e.From) + " → ")
	}
	b.WriteString(colourState(s.colour, e.To) + " (" + visible(e.Kind))
	if e.Reason != nil && *e.Reason != "" {
		b.WriteString(": " + visible(*e.Reason))
	}
	if e.NodeID != nil && *e.NodeID != "" {
		b.WriteString(" on " + visible(*e.NodeID))
	}
	b.WriteString(")")
	if r.MaxAttempts > 1 {
		fmt.Fprintf(&b, " · attempt %d/%d", e.Attempt, r.MaxAttempts)
	}
	if e.Attempt == r.Attempt {
		b.WriteString(stepsAt(r, e.At))
	}
	return b.String()
}

// stepsAt is " · steps n/m": how many of the run's steps had ended at t; "" for a hold, which
// has none.
func stepsAt(r client.Run, t time.Time) string {
	if r.Hold() {
		return ""
	}
	n := 0
	for _, st := range r.Steps {
		if wire.Final(st.State) && st.FinishedAt != nil && !st.FinishedAt.After(t) {
			n++
		}
	}
	return fmt.Sprintf(" · steps %d/%d", n, len(r.Steps))
}

// describe is a run's progress in one line: "run b: QUEUED · position 2 · steps 0/3",
// "run b: RUNNING on main=rpi-1 · steps 1/3 · attempt 2/2".
func describe(r client.Run, colour bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %s", visible(r.RunID), colourState(colour, r.State)+reasonSuffix(r))
	if r.State == wire.Running && len(r.Assigned) > 0 {
		b.WriteString(" on " + roles(r.Assigned))
	}
	if r.State == wire.Running && r.CancelRequestedAt != nil {
		b.WriteString(", cancelling")
	}
	if r.State == wire.Queued {
		b.WriteString(" · position " + position(r))
	}
	if r.Hold() { // no steps: its length is what it is for
		if r.State == wire.Queued && r.HoldSeconds != nil {
			b.WriteString(" · for " + short(seconds(float64(*r.HoldSeconds))))
		}
		return b.String()
	}
	fmt.Fprintf(&b, " · steps %d/%d", r.StepsDone(), len(r.Steps))
	if r.MaxAttempts > 1 {
		fmt.Fprintf(&b, " · attempt %d/%d", r.Attempt, r.MaxAttempts)
	}
	return b.String()
}

// printEnding says how a followed run ended: the steps that failed, with their exit codes and
// messages (a message's later lines indented under its step), and why it was cancelled.
func (a *app) printEnding(r client.Run) {
	w := a.stdout
	for _, st := range r.Steps {
		if st.State != wire.Failed {
			continue
		}
		line := fmt.Sprintf("  step %s failed", visible(st.ID))
		if st.ExitCode != nil {
			line += fmt.Sprintf(" (exit %d)", *st.ExitCode)
		}
		if st.Message != nil && *st.Message != "" {
			line += ": " + visibleLines(*st.Message, "    ")
		}
		fmt.Fprintln(w, line)
	}
	if r.State == wire.Cancelled && r.CancelReason != nil && *r.CancelReason != "" {
		fmt.Fprintf(w, "  cancelled: %s\n", visible(*r.CancelReason))
	}
}

package main

import (
	"context"
	"fmt"
	"io"
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
// line redrawn in place; elsewhere one line per change. With --output json the progress goes
// to stderr, and only when that is a terminal: stdout is for the API's JSON.
func (a *app) follow(ctx context.Context, api *client.Client, run client.Run) (*client.RunDetail, error) {
	if run.Owner != "" { // an admin's run: its id may be another owner's too
		api = api.ForOwner(run.Owner)
	}
	s := a.statusLine()
	began := a.now()
	var detail *client.RunDetail
	if s.live {
		s.show(run, 0)
	} else {
		s.last = progress(run) // the submit's answer said as much
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
	for !wire.Final(run.State) {
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
			s.show(run, a.now().Sub(began))
			poll.Reset(every)
		}
	}
	s.end()
	if detail == nil { // finished before the first read: the history comes with a read
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
	last   string // the last progress shown, for plain lines
	drawn  bool
}

func (a *app) statusLine() *status {
	switch {
	case !a.json():
		return &status{w: a.stdout, live: a.stdoutTTY, colour: a.colour(a.stdoutTTY)}
	case a.stderrTTY:
		return &status{w: a.stderr, live: true, colour: a.colour(true)}
	}
	return &status{}
}

// show draws the run's status: in place on a terminal, else as a new line when it changed.
func (s *status) show(r client.Run, took time.Duration) {
	if s.w == nil {
		return
	}
	line := describe(r, s.colour) + " · " + elapsed(took)
	if s.live {
		fmt.Fprint(s.w, "\r\x1b[K"+line)
		s.drawn = true
		return
	}
	if p := progress(r); p != s.last {
		s.last = p
		fmt.Fprintln(s.w, line)
	}
}

// end leaves the live line where it is and moves to the next.
func (s *status) end() {
	if s.live && s.drawn {
		fmt.Fprintln(s.w)
		s.drawn = false
	}
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

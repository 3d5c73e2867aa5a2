package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// holdFlags are what `mediator hold` is told: the nodes, the time, the run's id and priority.
type holdFlags struct {
	needs    []string
	node     string
	roles    []string
	length   string
	runID    string
	priority int
	wait     bool
}

func holdCommand(a *app) *cobra.Command {
	var h holdFlags
	cmd := &cobra.Command{
		Use:     "hold (--needs LABEL... | --node NODE_ID | --role NAME=LABEL,...) --for DURATION [--id ID] [--priority P] [--wait]",
		Short:   "Hold nodes for interactive work, for a time or until released",
		GroupID: "holds",
		Long: `Hold nodes for a person's interactive work: a run of kind hold, with no steps, that keeps
its nodes from every other run for --for (90m, 8h, 1d; at most the deployment's
MAX_HOLD_SECONDS), or until released (mediator release ID). It is matched, queued and placed
like any run.

  --needs LABEL   one node (the role "main") with these labels; repeatable, or comma-separated
  --node NODE_ID  that node itself (it adds the label node_id=NODE_ID to --needs)
  --role NAME=LABEL,LABEL
                  a role of its own, for holding several nodes; repeatable

The hold's id is --id, or one is made (a UUIDv7) and printed first. Placed at once (201), it
says each role's node and until when; queued (202), its position in the queue. --wait waits
for it to be placed, and exits 0 saying until when. Refused because no node of the fleet could
ever serve it (422): the unmet needs, exit 1. See mediator holds, extend and release.

` + exitCodesHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := h.request(cmd.Flags().Changed("priority"))
			if err != nil {
				return usage(err)
			}
			generated := req.RunID == ""
			if generated {
				req.RunID = uuid.Must(uuid.NewV7()).String()
			}
			return a.hold(cmd.Context(), req, generated, h.wait)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&h.needs, "needs", nil, "a label the node must have (key=value or key); repeatable, or comma-separated")
	f.StringVar(&h.node, "node", "", "hold this node: the label node_id=NODE_ID is added to --needs")
	f.StringArrayVar(&h.roles, "role", nil, "a role NAME=LABEL,LABEL (for several nodes); repeatable")
	f.StringVar(&h.length, "for", "", "how long to hold the nodes once placed: 90m, 8h, 1d (needed)")
	f.StringVar(&h.runID, "id", "", "the hold's run id (default: one is made and printed)")
	f.IntVar(&h.priority, "priority", 0, "the hold's priority in the queue, 0 to 100, higher first")
	f.BoolVar(&h.wait, "wait", false, "wait until the hold is placed; exit 0 saying until when")
	return cmd
}

// request is the submission the flags describe; priority says whether --priority was given.
func (h holdFlags) request(priority bool) (client.RunRequest, error) {
	req := client.RunRequest{RunID: h.runID}
	if h.length == "" {
		return req, errors.New("--for is needed: how long to hold the nodes (90m, 8h, 1d)")
	}
	secs, err := holdSeconds("--for", h.length)
	if err != nil {
		return req, err
	}
	req.HoldSeconds = &secs
	if priority {
		if h.priority < 0 || h.priority > wire.MaxPriority {
			return req, fmt.Errorf("--priority must be from 0 to %d", wire.MaxPriority)
		}
		req.Priority = &h.priority
	}
	needs := slices.Clone(h.needs)
	if h.node != "" {
		needs = append(needs, wire.NodeIDLabel(h.node))
	}
	switch {
	case len(h.roles) > 0 && len(needs) > 0:
		return req, errors.New("--needs and --node are the one role main; --role names roles of their own: give one or the other")
	case len(h.roles) > 0:
		req.Roles = map[string]client.RoleRequest{}
		for _, r := range h.roles {
			name, labels, err := roleFlag(r)
			if err != nil {
				return req, err
			}
			if _, ok := req.Roles[name]; ok {
				return req, fmt.Errorf("--role %s is given twice", name)
			}
			req.Roles[name] = client.RoleRequest{Needs: labels}
		}
	case len(needs) > 0:
		req.Needs = needs
	default:
		return req, errors.New("say which nodes to hold: --needs LABEL, --node NODE_ID or --role NAME=LABEL,...")
	}
	return req, nil
}

// roleFlag is one --role: "dut=board=rpi4,usb" is the role dut needing board=rpi4 and usb;
// "spare=" a role any node serves.
func roleFlag(s string) (string, []string, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", nil, fmt.Errorf("--role %q must be NAME=LABEL,LABEL (NAME= for any node)", s)
	}
	labels := []string{}
	for l := range strings.SplitSeq(list, ",") {
		if l = strings.TrimSpace(l); l != "" {
			labels = append(labels, l)
		}
	}
	return name, labels, nil
}

// holdSeconds reads a hold's length: a Go duration (90m, 1h30m), with d for days (1d, 1d12h),
// as whole seconds — a part of a second counts as one, so that a length is never cut short.
func holdSeconds(what, s string) (int, error) {
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive duration such as 90m, 8h or 1d, not %q", what, s)
	}
	secs := (d + time.Second - 1) / time.Second
	if secs > 1<<31-1 {
		return 0, fmt.Errorf("%s %q is too long", what, s)
	}
	return int(secs), nil
}

// parseDuration is time.ParseDuration with whole days in front: "2d", "1d12h".
func parseDuration(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > 100_000 {
		return 0, fmt.Errorf("bad number of days %q", days)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		more, err := time.ParseDuration(rest)
		if err != nil || more < 0 {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		d += more
	}
	return d, nil
}

func (a *app) hold(ctx context.Context, req client.RunRequest, generated, wait bool) error {
	api, err := a.client(ctx)
	if err != nil {
		return err
	}
	if generated {
		// First, so the id is known whatever happens next: submitting again with it is safe.
		w := a.stdout
		if a.json() {
			w = a.stderr
		}
		fmt.Fprintf(w, "run_id %s (made for this hold: give --id %s to submit it again)\n", req.RunID, req.RunID)
	}
	s, err := api.Submit(ctx, req)
	if err != nil {
		return err
	}
	if a.json() && (!wait || s.Refused() || s.Run.State != wire.Queued) {
		writeBody(a.stdout, s.Body)
	} else if !a.json() {
		a.printHoldSubmitted(s)
	}
	switch {
	case s.Refused():
		return exitWith(exitFailed)
	case !wait || s.Run.State != wire.Queued:
		return holdExit(s.Run)
	}
	d, err := a.followUntil(ctx, api, s.Run, func(r client.Run) bool { return r.State != wire.Queued })
	if err != nil {
		if ctx.Err() != nil {
			id := visible(s.Run.RunID)
			fmt.Fprintf(a.stderr, "\nstopped waiting for hold %s; it stays queued (mediator release %s gives it up)\n", id, id)
			return exitWith(exitInterrupted)
		}
		return err
	}
	if a.json() {
		writeBody(a.stdout, d.Body)
	} else {
		a.printHold(d.Run)
	}
	return holdExit(d.Run)
}

// holdExit is a hold's exit code: 0 while it stands (queued is what a submit without --wait
// asked for); once ended, as a run's.
func holdExit(r client.Run) error {
	if r.State == wire.Running || r.State == wire.Queued {
		return nil
	}
	return exitWith(outcome(r.State))
}

// printHoldSubmitted says what submitting the hold did, as printSubmitted does for a run.
func (a *app) printHoldSubmitted(s *client.Submitted) {
	w, r := a.stdout, s.Run
	switch {
	case s.Refused():
		fmt.Fprintf(w, "hold %s: %s, refused (422): no node of the fleet could ever serve it\n",
			visible(r.RunID), colourState(a.colour(a.stdoutTTY), r.State)+reasonSuffix(r))
		for _, l := range unmetLines(s.Unmet) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		return
	case s.Placed():
		a.printHoldAs(r, " (201)")
	case s.Queued():
		a.printHoldAs(r, " (202)")
	default:
		a.printHoldAs(r, " (200: submitted before with this same request; the hold as it stands)")
	}
}

func (a *app) printHold(r client.Run) { a.printHoldAs(r, "") }

// printHoldAs says where a hold stands, its first line ending in note: running, until when and
// on which nodes; queued, where in the queue and for how long once placed; or how it ended.
func (a *app) printHoldAs(r client.Run, note string) {
	w, now := a.stdout, a.now()
	fmt.Fprintf(w, "hold %s: %s%s\n", visible(r.RunID), holdState(r, now, a.colour(a.stdoutTTY)), note)
	if r.State == wire.Running {
		for _, role := range slices.Sorted(maps.Keys(r.Assigned)) {
			fmt.Fprintf(w, "  %s → %s\n", visible(role), visible(r.Assigned[role]))
		}
	}
}

// holdState is a hold's state in words: "RUNNING until 2026-12-01 13:30:00 UTC (in 1h)",
// "QUEUED at queue position 2, for 1h once placed", "SUCCEEDED hold_released", "CANCELLED:
// released before it was placed".
func holdState(r client.Run, now time.Time, colour bool) string {
	st := colourState(colour, r.State) + reasonSuffix(r)
	switch r.State {
	case wire.Running:
		if r.HoldEndsAt != nil {
			return st + " until " + until(*r.HoldEndsAt, now)
		}
	case wire.Queued:
		st += " at queue position " + position(r)
		if r.HoldSeconds != nil {
			st += ", for " + holdLength(r) + " once placed"
		}
	case wire.Cancelled:
		if why := deref(r.CancelReason); why != "" {
			st += ": " + visible(why)
		}
	}
	return st
}

// until is when a hold ends, in now's time zone, and how far off: "2026-12-01 13:30:00 UTC (in
// 1h)". Both are rounded to the second: a 1h hold read just after it was placed is 1h off,
// not 59m.
func until(end, now time.Time) string {
	when := end.Round(time.Second).In(now.Location()).Format("2006-01-02 15:04:05 MST")
	d := end.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return when + " (in " + short(d) + ")"
	case d < 0:
		return when + " (" + short(-d) + " ago)"
	}
	return when + " (now)"
}

// holdLength is a hold's length: "8h", "1h30m".
func holdLength(r client.Run) string {
	if r.HoldSeconds == nil {
		return ""
	}
	return short(seconds(float64(*r.HoldSeconds)))
}

func extendCommand(a *app) *cobra.Command {
	var owner string
	cmd := &cobra.Command{
		Use:     "extend ID DURATION [--owner O]",
		Short:   "Give a hold more time",
		GroupID: "holds",
		Long: `Give a hold DURATION more (30m, 2h, 1d): a running hold ends that much later, to at most the
deployment's MAX_HOLD_SECONDS from now; a queued one holds its nodes that much longer once
placed. A hold that ended is refused (409 run_not_live), as is a run that is not a hold (409
not_a_hold); both exit 3.`,
		Args: twoArgs("hold's run id and the duration"),
		RunE: func(cmd *cobra.Command, args []string) error {
			secs, err := holdSeconds("the duration", args[1])
			if err != nil {
				return usage(err)
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := forOwner(api, owner).Extend(cmd.Context(), args[0], secs)
			if err != nil {
				return err
			}
			return a.printHoldReply(r)
		},
	}
	ownerFlag(cmd, &owner)
	return cmd
}

func releaseCommand(a *app) *cobra.Command {
	var owner string
	cmd := &cobra.Command{
		Use:     "release ID [--owner O]",
		Short:   "Release a hold: its nodes go back to the queue",
		GroupID: "holds",
		Long: `Release a hold: a running one ends SUCCEEDED and its nodes go to the runs that wait for
them; a queued one is CANCELLED. A hold that ended is refused (409 run_not_live), as is a run
that is not a hold (409 not_a_hold; mediator cancel ends those); both exit 3.`,
		Args: oneArg("hold's run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := forOwner(api, owner).Release(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printHoldReply(r)
		},
	}
	ownerFlag(cmd, &owner)
	return cmd
}

func (a *app) printHoldReply(r *client.RunReply) error {
	if a.json() {
		writeBody(a.stdout, r.Body)
		return nil
	}
	a.printHold(r.Run)
	return nil
}

func holdsCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "holds",
		Short:   "List your holds that are queued or running",
		GroupID: "holds",
		Long: `List the holds that stand — running, then queued, newest first: yours, or every owner's for
an admin. With --output json, one {"runs": [...], "next": null}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			// One listing per state the API filters by, rather than every hold that ever was.
			var pages []*client.RunPage
			for _, state := range []string{wire.Running, wire.Queued} {
				for page, err := range api.RunPages(cmd.Context(), client.ListRunsParams{Kind: client.KindHold, State: state, Limit: wire.MaxPageSize}) {
					if err != nil {
						return err
					}
					pages = append(pages, page)
				}
			}
			if a.json() {
				return a.printPagesJSON(pages, true)
			}
			a.printHolds(pages)
			return nil
		},
	}
}

// printHolds is the table of holds: RUN, STATE, NODES, UNTIL, and OWNER when an admin sees
// other owners'.
func (a *app) printHolds(pages []*client.RunPage) {
	var holds []client.Run
	for _, p := range pages {
		holds = append(holds, p.Runs...)
	}
	if len(holds) == 0 {
		fmt.Fprintln(a.stdout, "no holds")
		return
	}
	now := a.now()
	t := &table{header: []string{"RUN", "STATE", "NODES", "UNTIL"}, coloured: []int{1}}
	owners := slices.ContainsFunc(holds, func(r client.Run) bool { return r.Owner != "" })
	if owners {
		t.header = append(t.header, "OWNER")
	}
	for _, r := range holds {
		when := ""
		switch {
		case r.State == wire.Queued:
			when = "queued · " + position(r) + " ahead in the queue"
			if r.HoldSeconds != nil {
				when += " · for " + holdLength(r)
			}
		case r.HoldEndsAt != nil:
			when = until(*r.HoldEndsAt, now)
		}
		cells := []string{r.RunID, r.State, roles(r.Assigned), when}
		if owners {
			cells = append(cells, r.Owner)
		}
		t.add(cells...)
	}
	t.write(a.stdout, a.colour(a.stdoutTTY))
}

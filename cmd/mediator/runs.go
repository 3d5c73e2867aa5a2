package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"mediator/shared/client"
	"mediator/shared/wire"
)

func runsCommand(a *app) *cobra.Command {
	var p client.ListRunsParams
	var all bool
	var priority int
	cmd := &cobra.Command{
		Use:     "runs [--state S] [--kind K] [--priority P] [--limit N] [--all]",
		Short:   "List runs, newest first",
		GroupID: "runs",
		Long: `List runs, newest first: yours, or every run for an admin. One page (--limit, 20 by
default, at most 100) unless --all, which follows the pages to the end; with --output json,
--all prints one {"runs": [...], "next": null}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p.State = strings.ToUpper(p.State)
			if p.State != "" && !slices.Contains(wire.RunStates, p.State) {
				return usagef("--state must be one of %s", strings.Join(wire.RunStates, ", "))
			}
			if p.Kind != "" && !slices.Contains(wire.RunKinds, p.Kind) {
				return usagef("--kind must be one of %s", strings.Join(wire.RunKinds, ", "))
			}
			if p.Limit < 0 || p.Limit > wire.MaxPageSize {
				return usagef("--limit must be from 1 to %d", wire.MaxPageSize)
			}
			if cmd.Flags().Changed("priority") {
				if priority < 0 || priority > wire.MaxPriority {
					return usagef("--priority must be from 0 to %d", wire.MaxPriority)
				}
				p.Priority = &priority
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			var pages []*client.RunPage
			for page, err := range api.RunPages(cmd.Context(), p) {
				if err != nil {
					return err
				}
				pages = append(pages, page)
				if !all {
					break
				}
			}
			if a.json() {
				return a.printPagesJSON(pages, all)
			}
			a.printRuns(pages)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.State, "state", "", "only runs in this state ("+strings.Join(wire.RunStates, ", ")+")")
	f.StringVar(&p.Kind, "kind", "", "only runs of this kind ("+strings.Join(wire.RunKinds, ", ")+")")
	f.IntVar(&priority, "priority", 0, "only runs of this priority (0 to 100)")
	f.IntVar(&p.Limit, "limit", 0, "runs per page (1 to 100; the API's default is 20)")
	f.StringVar(&p.After, "after", "", "start after this cursor (the next page of an earlier listing)")
	f.BoolVar(&all, "all", false, "follow the pages to the last one")
	return cmd
}

// printPagesJSON prints one page as received, or every page's runs as one listing.
func (a *app) printPagesJSON(pages []*client.RunPage, all bool) error {
	if !all {
		writeBody(a.stdout, pages[0].Body)
		return nil
	}
	var runs []json.RawMessage
	for _, p := range pages {
		var page struct {
			Runs []json.RawMessage `json:"runs"`
		}
		if err := json.Unmarshal(p.Body, &page); err != nil {
			return err
		}
		runs = append(runs, page.Runs...)
	}
	var b bytes.Buffer
	b.WriteString(`{"runs":[`)
	for i, r := range runs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r)
	}
	b.WriteString(`],"next":null}`)
	writeBody(a.stdout, b.Bytes())
	return nil
}

func (a *app) printRuns(pages []*client.RunPage) {
	now := a.now()
	t := &table{header: []string{"RUN ID", "STATE", "REASON", "ATTEMPT", "STEPS", "WHERE", "CREATED", "ENDED"}, coloured: []int{1}}
	// A KIND column only when a run is not a plain one (a hold, a health check): most listings
	// have none.
	kinds := false
	for _, p := range pages {
		kinds = kinds || slices.ContainsFunc(p.Runs, func(r client.Run) bool { return otherKind(r) })
	}
	if kinds {
		t.header = slices.Insert(t.header, 1, "KIND")
		t.coloured = []int{2}
	}
	for _, p := range pages {
		for _, r := range p.Runs {
			where := roles(r.Assigned)
			if r.State == wire.Queued {
				where = "queue position " + position(r)
			} else if wire.Final(r.State) {
				where = ""
			}
			steps := fmt.Sprintf("%d/%d", r.StepsDone(), len(r.Steps))
			if r.Hold() {
				steps = "" // it has none to do
			}
			reason := r.ReasonText()
			if r.Waiting != nil {
				reason = r.Waiting.Reason // why it waits
			}
			cells := []string{r.RunID, r.State, reason, fmt.Sprintf("%d/%d", r.Attempt, r.MaxAttempts),
				steps, where, ago(r.CreatedAt, now), agoPtr(r.FinishedAt, now)}
			if kinds {
				kind := ""
				if otherKind(r) {
					kind = r.Kind
				}
				cells = slices.Insert(cells, 1, kind)
			}
			t.add(cells...)
		}
	}
	if len(t.rows) == 0 {
		fmt.Fprintln(a.stdout, "no runs")
	} else {
		t.write(a.stdout, a.colour(a.stdoutTTY))
	}
	if last := pages[len(pages)-1]; last.Next != nil {
		fmt.Fprintf(a.stdout, "more: mediator runs --after %s (or --all)\n", visible(*last.Next))
	}
}

// ownerFlag is an admin's --owner: whose run an id means when runs of several owners have it.
func ownerFlag(cmd *cobra.Command, owner *string) {
	cmd.Flags().StringVar(owner, "owner", "", "admins: whose run the id means (client:alice), when several owners have a run of that id")
}

// forOwner is api naming the runs of owner, when one is given.
func forOwner(api *client.Client, owner string) *client.Client {
	if owner == "" {
		return api
	}
	return api.ForOwner(owner)
}

func runCommand(a *app) *cobra.Command {
	var owner string
	cmd := &cobra.Command{
		Use:     "run ID [--owner O]",
		Short:   "Show a run: its state, roles and nodes, steps, and history",
		GroupID: "runs",
		Args:    oneArg("run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			d, err := forOwner(api, owner).GetRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, d.Body)
				return nil
			}
			a.printRun(d, owner)
			return nil
		},
	}
	ownerFlag(cmd, &owner)
	return cmd
}

// otherKind: the run is not a plain one a client submitted (a hold, a health check).
func otherKind(r client.Run) bool { return r.Kind != "" && r.Kind != client.KindRun }

func (a *app) printRun(d *client.RunDetail, owner string) {
	w, r, now := a.stdout, d.Run, a.now()
	colour := a.colour(a.stdoutTTY)
	kind := ""
	if otherKind(r) {
		kind = " (" + visible(r.Kind) + ")"
	}
	fmt.Fprintf(w, "run %s%s: %s", visible(r.RunID), kind, colourState(colour, r.State)+reasonSuffix(r))
	if r.State == wire.Queued {
		fmt.Fprintf(w, " at queue position %s", position(r))
	}
	fmt.Fprintf(w, " (attempt %d of %d)\n", r.Attempt, r.MaxAttempts)
	times := []string{"created " + ago(r.CreatedAt, now)}
	if r.StartedAt != nil {
		times = append(times, "started "+ago(*r.StartedAt, now))
	}
	if r.FinishedAt != nil {
		took := r.FinishedAt.Sub(r.CreatedAt)
		times = append(times, fmt.Sprintf("finished %s, %s after it was submitted", ago(*r.FinishedAt, now), elapsed(took)))
	}
	fmt.Fprintf(w, "  %s\n", strings.Join(times, " · "))
	for _, l := range waitingLines(r.Waiting) {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if r.Hold() {
		line := "  hold of " + holdLength(r)
		switch {
		case r.State == wire.Running && r.HoldEndsAt != nil:
			line += " · until " + until(*r.HoldEndsAt, now)
		case r.State == wire.Queued:
			line += " · from when it is placed"
		case r.HoldEndsAt != nil:
			line += " · was to end " + until(*r.HoldEndsAt, now)
		}
		fmt.Fprintln(w, line)
	}
	if r.DebugHold != nil {
		fmt.Fprintf(w, "  its failed boards are kept in hold %s (mediator holds; mediator release %s)\n", visible(*r.DebugHold), visible(*r.DebugHold))
	}
	if r.DebugOf != nil {
		fmt.Fprintf(w, "  keeps the failed boards of run %s for a post-mortem\n", visible(*r.DebugOf))
	}
	if r.Owner != "" {
		fmt.Fprintf(w, "  owner %s · key %s\n", visible(r.Owner), visible(r.Key))
	}
	if r.CancelRequestedAt != nil {
		line := "  cancel requested " + ago(*r.CancelRequestedAt, now)
		if r.CancelReason != nil && *r.CancelReason != "" {
			line += ": " + visible(*r.CancelReason)
		}
		fmt.Fprintln(w, line)
	}

	fmt.Fprintln(w)
	roleTable := &table{header: []string{"ROLE", "NEEDS", "NODE"}}
	for _, name := range slices.Sorted(maps.Keys(r.Roles)) {
		node := r.Roles[name].NodeID
		if node == "" {
			node = r.Assigned[name]
		}
		roleTable.add(name, needs(r.Roles[name].Needs), node)
	}
	roleTable.write(w, false)

	if r.Hold() { // no steps, and no failures of its own to show
		a.printHistory(d)
		return
	}
	fmt.Fprintln(w)
	steps := &table{header: []string{"STEP", "ROLE", "STATE", "AFTER", "TRIES", "EXIT", "STARTED", "FINISHED", "MESSAGE"}, coloured: []int{2}}
	for _, s := range r.Steps {
		exit := ""
		if s.ExitCode != nil {
			exit = fmt.Sprint(*s.ExitCode)
		}
		steps.add(s.ID, s.Role, s.State, strings.Join(s.After, ","), fmt.Sprintf("%d/%d", s.Tries, s.Retries+1), exit,
			agoPtr(s.StartedAt, now), agoPtr(s.FinishedAt, now), oneLine(deref(s.Message)))
	}
	steps.write(w, colour)
	a.printFailures(r, owner)
	a.printHistory(d)
}

// printHistory is a run's history as a table, under its other tables.
func (a *app) printHistory(d *client.RunDetail) {
	w, now := a.stdout, a.now()
	colour := a.colour(a.stdoutTTY)
	if len(d.History) == 0 {
		return
	}
	fmt.Fprintln(w)
	history := &table{header: []string{"WHEN", "AT", "ATTEMPT", "EVENT", "FROM", "TO", "REASON", "NODE"}, coloured: []int{5}}
	first := d.History[0].At
	for _, e := range d.History {
		history.add(ago(e.At, now), "+"+elapsed(e.At.Sub(first)), fmt.Sprint(e.Attempt), e.Kind, deref(e.From), e.To,
			deref(e.Reason), deref(e.NodeID))
	}
	history.write(w, colour)
}

// failureLines is how many of a failed step's message's last lines `mediator run` shows.
const failureLines = 8

// printFailures shows, under the steps, the end of each failed step's message — its output's
// last lines, which end with the error a script printed last — and where the rest is.
func (a *app) printFailures(r client.Run, owner string) {
	w := a.stdout
	for _, s := range r.Steps {
		if s.State != wire.Failed {
			continue
		}
		fmt.Fprintln(w)
		line := "step " + visible(s.ID) + " failed"
		if s.ExitCode != nil {
			line += fmt.Sprintf(" (exit %d)", *s.ExitCode)
		}
		msg := strings.TrimRight(strings.ReplaceAll(deref(s.Message), "\r\n", "\n"), "\n")
		if msg != "" {
			lines := strings.Split(msg, "\n")
			if len(lines) > failureLines {
				line += fmt.Sprintf(", the last %d lines of its message:", failureLines)
				lines = lines[len(lines)-failureLines:]
			} else {
				line += ":"
			}
			fmt.Fprintln(w, line)
			for _, l := range lines {
				fmt.Fprintln(w, "    "+escape(l, true))
			}
		} else {
			fmt.Fprintln(w, line)
		}
		cmd := "mediator logs " + visible(r.RunID) + " " + visible(s.ID)
		if o := cmp.Or(owner, r.Owner); o != "" { // an admin's: the id may be several owners'
			cmd += " --owner " + visible(o)
		}
		fmt.Fprintf(w, "  the whole log: %s\n", cmd)
	}
}

// oneLine keeps a message's cell short: its first line, cut at a character's start (a cut
// through one would show as \x escapes of its bytes).
func oneLine(s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if len(s) > 60 {
		end := 60
		for !utf8.RuneStart(s[end]) {
			end--
		}
		s, cut = s[:end], true
	}
	if cut {
		s += "…"
	}
	return s
}

func cancelCommand(a *app) *cobra.Command {
	var req client.CancelRequest
	var owner string
	cmd := &cobra.Command{
		Use:     "cancel ID [--force] [--reason R]",
		Short:   "Cancel a run",
		GroupID: "runs",
		Long: `Cancel a run. A queued run is CANCELLED at once; a running one asks its nodes to stop,
and is CANCELLED when they have (or after a grace). --force (admins) settles it at once.`,
		Args: oneArg("run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			c, err := forOwner(api, owner).Cancel(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, c.Body)
				return nil
			}
			st := colourState(a.colour(a.stdoutTTY), c.Run.State) + reasonSuffix(c.Run)
			if c.Settled() {
				fmt.Fprintf(a.stdout, "run %s: %s (200)\n", visible(c.Run.RunID), st)
			} else {
				fmt.Fprintf(a.stdout, "run %s: %s, cancel requested: its nodes were asked to stop (202)\n", visible(c.Run.RunID), st)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&req.Force, "force", false, "settle it CANCELLED at once, without waiting for its nodes (admins)")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, kept with the run")
	ownerFlag(cmd, &owner)
	return cmd
}

func priorityCommand(a *app) *cobra.Command {
	var owner string
	cmd := &cobra.Command{
		Use:     "priority ID P",
		Short:   "Change a queued run's priority (admins)",
		GroupID: "runs",
		Long: `Change a queued run's priority, 0 to 100, higher first: the queue orders by priority,
then arrival. Raised, the run may be placed at once; a run no longer queued is refused (exit
1). The change is kept in the run's history.`,
		Args: twoArgs("run id and the priority"),
		RunE: func(cmd *cobra.Command, args []string) error {
			priority, err := strconv.Atoi(args[1])
			if err != nil || priority < 0 || priority > wire.MaxPriority {
				return usagef("the priority must be a whole number from 0 to %d, not %q", wire.MaxPriority, args[1])
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := forOwner(api, owner).SetPriority(cmd.Context(), args[0], priority)
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, r.Body)
				return nil
			}
			st := colourState(a.colour(a.stdoutTTY), r.Run.State)
			if r.Run.State == wire.Queued {
				st += " at queue position " + position(r.Run)
			}
			fmt.Fprintf(a.stdout, "run %s: priority %d, %s\n", visible(r.Run.RunID), r.Run.Priority, st)
			return nil
		},
	}
	ownerFlag(cmd, &owner)
	return cmd
}

// waitingLines say why a queued run waits: its reason, then how the nodes that could serve
// each role stand, the standings with none left out (nothing for a run not waiting).
func waitingLines(w *client.Waiting) []string {
	if w == nil {
		return nil
	}
	lines := []string{"waits: " + visible(w.Reason) + " — " + waitReasonText[w.Reason]}
	for _, r := range w.Roles {
		var parts []string
		for _, c := range []struct {
			n    int
			what string
		}{{r.Available, "available"}, {r.Busy, "busy"}, {r.Held, "held"}, {r.Checking, "checking"},
			{r.Draining, "draining"}, {r.Quarantined, "quarantined"}, {r.Offline, "offline"}} {
			if c.n == 0 {
				continue
			}
			part := fmt.Sprintf("%d %s", c.n, c.what)
			if c.what == "busy" && len(r.BusyRuns) > 0 {
				var ids []string
				for _, b := range r.BusyRuns {
					ids = append(ids, visible(b.RunID))
				}
				part += " (" + strings.Join(ids, ", ") + ")"
			}
			parts = append(parts, part)
		}
		if len(parts) == 0 {
			parts = []string{"no node has its labels"}
		}
		lines = append(lines, fmt.Sprintf("  role %s (%s): %s", visible(r.Role), needs(r.Needs), strings.Join(parts, " · ")))
	}
	return lines
}

// waitReasonText is each reason of wire.WaitReasons in a few words.
var waitReasonText = map[string]string{
	wire.WaitForCapacity:      "no node of the fleet can serve a role; it waits for one to join",
	wire.WaitNoLiveNode:       "every node that could serve a role is offline",
	wire.WaitUnavailable:      "every live node that could serve a role is drained, quarantined, held or checking",
	wire.WaitAllBusy:          "every node that could serve a role is busy",
	wire.WaitNotAllRoles:      "each role has a free node, but not all roles at once",
	wire.WaitKeptForProtected: "the free nodes are kept for a run that has waited too long",
	wire.WaitQueueAhead:       "the free nodes go to runs ahead of it",
	wire.WaitPlacing:          "nothing is in its way: it is being placed",
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"mediator/shared/client"
	"mediator/shared/wire"
)

func submitCommand(a *app) *cobra.Command {
	var file, runID, keep string
	var dry, wait, logs bool
	var priority int
	cmd := &cobra.Command{
		Use:     "submit -f FILE [--run-id ID] [--priority P] [--dry-run] [--wait [--logs]]",
		Short:   "Submit a run from a YAML or JSON file, and optionally follow it to its end",
		GroupID: "runs",
		Long: `Submit a run. FILE (- for stdin) is the body POST /v1/runs takes, in JSON or YAML:

  run_id: build-42            # optional: --run-id, or one is made (a UUIDv7) and printed
  needs: [board=rpi4]         # one node with these labels (or roles: {name: {needs: [...]}})
  max_attempts: 2
  priority: 70                # 0 to 100, higher first; 50 unless said (or --priority)
  steps:                      # each spec is what the node's agent runs (mediator agent --help)
    - id: build
      spec: {cmd: 'echo version=1.0 >> "$MEDIATOR_OUTPUTS"'}
    - id: test
      after: [build]
      spec: {argv: [sh, -c, 'test "$MEDIATOR_INPUT_BUILD_VERSION" = 1.0'], timeout_seconds: 600}

The answer: the run placed on its nodes (201), queued with its position (202), the same
request as before (200; submitting a file again is always safe), or refused because no node
of the fleet could ever serve it (422, with the unmet needs; exit 1). A malformed run is a
400 listing every problem's path (exit 3).

--dry-run asks what a submit would do now, storing nothing: placeable or busy (exit 0),
impossible or too_wide (exit 1).

--wait follows the run until it ends, and exits 0 when it SUCCEEDED, 1 FAILED, 2 CANCELLED.
On a terminal it keeps one status line up to date. Otherwise (a CI log, a pipe) it prints a
line per change, in the order they happened however far apart its reads of the run: each
event of the run's history (promoted, cancel_requested, released, ...), each step's end, a
new queue position, and last the run's final status.
--keep-on-failure 30m keeps the boards of failed steps: when the run fails, their nodes pass
to a hold of yours for that long (mediator holds; mediator release ID), taken by no other run.
--logs prints the steps' logs instead as they run (as mediator logs --follow does: a header
whenever the step whose output follows changes), then how the run ended.

` + exitCodesHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("give the run file: -f FILE (- for stdin)")
			}
			if dry && wait {
				return usagef("--dry-run stores nothing: there is no run to --wait for")
			}
			if logs && !wait {
				return usagef("--logs goes with --wait: it follows the steps' logs until the run ends")
			}
			if logs && a.json() {
				return usagef("--logs writes the logs to stdout, where --output json writes the API's answers: give one")
			}
			var prio *int
			if cmd.Flags().Changed("priority") {
				if priority < 0 || priority > 100 {
					return usagef("--priority must be from 0 to 100")
				}
				prio = &priority
			}
			keepFor := 0
			if keep != "" {
				var err error
				if keepFor, err = holdSeconds("--keep-on-failure", keep); err != nil {
					return usage(err)
				}
			}
			return a.submit(cmd.Context(), file, runID, prio, keepFor, dry, wait, logs)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the run, in YAML or JSON (- for stdin)")
	f.StringVar(&runID, "run-id", "", "the run's id, when the file has none (it must match the file's when it has one)")
	f.IntVar(&priority, "priority", 0, "the run's priority, 0 to 100, higher first (when the file gives none)")
	f.BoolVar(&dry, "dry-run", false, "only say whether the run could be placed now; store nothing")
	f.BoolVar(&wait, "wait", false, "follow the run until it ends; the exit code says how")
	f.BoolVar(&logs, "logs", false, "with --wait: print the steps' logs as they run")
	f.StringVar(&keep, "keep-on-failure", "", "keep the boards of failed steps this long in a hold of yours (30m, 2h) for a post-mortem")
	return cmd
}

func (a *app) submit(ctx context.Context, file, runID string, priority *int, keepFor int, dry, wait, logs bool) error {
	data, err := a.readFile(file)
	if err != nil {
		return usage(err)
	}
	run, err := loadRun(data, runID, func() string { return uuid.Must(uuid.NewV7()).String() })
	if err == nil && priority != nil {
		run, err = withPriority(run, *priority)
	}
	if err == nil && keepFor > 0 {
		run, err = withNumber(run, "keep_on_failure_seconds", "--keep-on-failure", keepFor)
	}
	if err != nil {
		return usage(fmt.Errorf("%s: %w", fileName(file), err))
	}
	api, err := a.client(ctx)
	if err != nil {
		return err
	}
	if run.generated && !dry {
		// First, so the id is known whatever happens next: submitting again with it is safe.
		w := a.stdout
		if a.json() {
			w = a.stderr
		}
		fmt.Fprintf(w, "run_id %s (made for this run: give --run-id %s to submit it again)\n", run.runID, run.runID)
	}
	if dry {
		return a.dryRun(ctx, api, run.body)
	}
	s, err := api.Submit(ctx, run.body)
	if err != nil {
		return err
	}
	if a.json() && !wait {
		writeBody(a.stdout, s.Body)
	} else if !a.json() {
		a.printSubmitted(s)
	}
	switch {
	case s.Refused():
		if a.json() && wait {
			writeBody(a.stdout, s.Body)
		}
		return exitWith(exitFailed)
	case !wait:
		return nil
	}
	var final *client.RunDetail
	if logs {
		final, err = a.followLogs(ctx, api, s.Run)
	} else {
		final, err = a.follow(ctx, api, s.Run)
	}
	if err != nil {
		if ctx.Err() != nil {
			id := visible(s.Run.RunID)
			fmt.Fprintf(a.stderr, "\nstopped following run %s; it goes on (mediator run %s)\n", id, id)
			return exitWith(exitInterrupted)
		}
		return err
	}
	if a.json() {
		writeBody(a.stdout, final.Body)
	} else {
		a.printEnding(final.Run)
	}
	return exitWith(outcome(final.Run.State))
}

// outcome is the exit code of a run that ended.
func outcome(state string) int {
	switch state {
	case wire.Succeeded:
		return exitOK
	case wire.Cancelled:
		return exitCancelled
	}
	return exitFailed
}

func (a *app) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.stdin)
	}
	data, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no run file %s", name)
	}
	return data, err
}

func fileName(name string) string {
	if name == "-" {
		return "stdin"
	}
	return name
}

// printSubmitted says what the submit did: the state, then the queue position, the nodes, or
// the unmet needs.
func (a *app) printSubmitted(s *client.Submitted) {
	w, r, id := a.stdout, s.Run, visible(s.Run.RunID)
	c := a.colour(a.stdoutTTY)
	st := colourState(c, r.State)
	switch {
	case s.Placed():
		fmt.Fprintf(w, "run %s: %s, placed on its nodes (201)\n", id, st)
	case s.Queued():
		fmt.Fprintf(w, "run %s: %s at queue position %s (202)\n", id, st, position(r))
		for _, l := range waitingLines(r.Waiting) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		for _, warn := range s.Warnings {
			fmt.Fprintf(a.stderr, "mediator: warning: %s\n", visible(warn.Message))
		}
	case s.Refused():
		fmt.Fprintf(w, "run %s: %s, refused (422): no node of the fleet could ever serve it\n",
			id, colourState(c, r.State)+reasonSuffix(r))
		for _, l := range unmetLines(s.Unmet) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		return
	default:
		fmt.Fprintf(w, "run %s: %s (200: submitted before with this same request; the run as it stands)\n",
			id, st+reasonSuffix(r))
		if r.State == wire.Queued {
			fmt.Fprintf(w, "  queue position %s\n", position(r))
		}
	}
	for _, role := range slices.Sorted(maps.Keys(r.Assigned)) {
		fmt.Fprintf(w, "  %s → %s\n", visible(role), visible(r.Assigned[role]))
	}
}

func position(r client.Run) string {
	if r.QueuePosition == nil {
		return "?"
	}
	return fmt.Sprint(*r.QueuePosition)
}

// reasonSuffix is " <reason>" when the reason says more than the state ("FAILED step_failed",
// but not "CANCELLED cancelled").
func reasonSuffix(r client.Run) string {
	if r.Reason == nil || strings.EqualFold(*r.Reason, r.State) {
		return ""
	}
	return " " + visible(*r.Reason)
}

// colourState is a state from the API, visible, painted when colour is on.
func colourState(colour bool, s string) string {
	s = visible(s)
	if !colour {
		return s
	}
	return paint(stateColour(s), s)
}

// dryRun prints a dry run's verdict; impossible and too_wide exit 1.
func (a *app) dryRun(ctx context.Context, api *client.Client, body []byte) error {
	v, err := api.DryRun(ctx, body)
	if err != nil {
		return err
	}
	if a.json() {
		writeBody(a.stdout, v.Body)
	} else {
		w := a.stdout
		switch v.Verdict {
		case wire.Placeable:
			fmt.Fprintln(w, "dry run: placeable: a submit now would be placed")
			for _, role := range slices.Sorted(maps.Keys(v.Assigned)) {
				fmt.Fprintf(w, "  %s → %s\n", visible(role), visible(v.Assigned[role]))
			}
		case wire.Busy:
			fmt.Fprintln(w, "dry run: busy: nodes of the fleet could serve it, but not now; a submit would queue")
		case wire.Impossible:
			fmt.Fprintln(w, "dry run: impossible: no node of the fleet could ever serve it")
			for _, l := range unmetLines(v.Unmet) {
				fmt.Fprintf(w, "  %s\n", l)
			}
		case wire.TooWide:
			fmt.Fprintf(w, "dry run: too_wide: %d roles is more than the API allows in one run\n", v.Width)
		default:
			fmt.Fprintf(w, "dry run: %s\n", visible(v.Verdict))
		}
	}
	switch v.Verdict {
	case wire.Placeable, wire.Busy:
		return nil
	}
	return exitWith(exitFailed)
}

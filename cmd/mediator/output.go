package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"mediator/shared/client"
)

// colour reports whether output to a terminal may be coloured: never with NO_COLOR set (to
// anything but "", as no-color.org reads it) or on a dumb terminal.
func (a *app) colour(tty bool) bool {
	return tty && a.getenv("NO_COLOR") == "" && a.getenv("TERM") != "dumb"
}

// ANSI colours, every one two digits long: a coloured column is padded as one whose cells are
// all the same few bytes longer, so tabwriter still lines it up.
const (
	green   = "32"
	red     = "31"
	yellow  = "33"
	cyan    = "36"
	plain   = "39"
	dimGrey = "90"
)

func paint(code, s string) string { return "\x1b[" + code + "m" + s + "\x1b[0m" }

// stateColour is the colour of a run, step or node state.
func stateColour(state string) string {
	switch state {
	case client.Succeeded, "idle", "yes":
		return green
	case client.Failed, "offline", "no":
		return red
	case client.Cancelled, "draining":
		return yellow
	case client.Running, "leased":
		return cyan
	case client.Skipped:
		return dimGrey
	}
	return plain
}

// table writes rows under a header with aligned columns. The columns listed in coloured are
// painted by state when colour is on (the header with the terminal's own colour).
type table struct {
	header   []string
	rows     [][]string
	coloured []int
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, colour bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string, header bool) {
		out := make([]string, len(cells))
		for i, c := range cells {
			if c == "" {
				c = "-"
			}
			if colour && slices.Contains(t.coloured, i) {
				code := plain
				if !header {
					code = stateColour(c)
				}
				c = paint(code, c)
			}
			out[i] = c
		}
		fmt.Fprintln(tw, strings.Join(out, "\t"))
	}
	line(t.header, true)
	for _, r := range t.rows {
		line(r, false)
	}
	_ = tw.Flush()
}

// ago is a past (or future) time relative to now: "just now", "12s ago", "3m ago", "in 40s".
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + short(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return short(d) + " ago"
}

func agoPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	return ago(*t, now)
}

// short is a duration in its largest unit or two: "12s", "3m", "2h5m", "4d".
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 && h < 10 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// elapsed is a running time: "850ms", "12.3s", "2m05s", "1h02m".
func elapsed(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// seconds is a wait in seconds as a duration.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}

// roles is "main=rpi-1, peer=rpi-2": where a run's roles are, by role name.
func roles(assigned map[string]string) string {
	var out []string
	for _, role := range slices.Sorted(maps.Keys(assigned)) {
		out = append(out, role+"="+assigned[role])
	}
	return strings.Join(out, ", ")
}

// needs is a set of labels, or "(any node)".
func needs(labels []string) string {
	if len(labels) == 0 {
		return "(any node)"
	}
	return strings.Join(labels, ",")
}

// unmetLines are a refusal's roles and what they need that no node has.
func unmetLines(unmet []client.Unmet) []string {
	var out []string
	for _, u := range unmet {
		out = append(out, fmt.Sprintf("role %s needs %s", u.Role, needs(u.Needs)))
	}
	return out
}

// state is a run's state with its reason: "FAILED step_failed".
func state(r client.Run) string {
	return strings.TrimSpace(r.State + " " + r.ReasonText())
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

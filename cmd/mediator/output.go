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
	"unicode/utf8"

	"mediator/shared/client"
	"mediator/shared/wire"
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
	case wire.Succeeded, wire.NodeIdle, "yes", client.HealthHealthy:
		return green
	case wire.Failed, wire.NodeOffline, "no", client.HealthQuarantined:
		return red
	case wire.Cancelled, wire.NodeDraining, client.HealthSuspect:
		return yellow
	case wire.Running, wire.NodeLeased:
		return cyan
	case wire.Skipped:
		return dimGrey
	}
	return plain
}

// table writes rows under a header with aligned columns. Every cell is written visible, so a
// cell is one line and shows its controls, whoever filled it. The columns listed in coloured
// are painted by state when colour is on (the header with the terminal's own colour).
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
			c = visible(c)
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

// visible is text this program did not write, as it may be shown among the program's own:
// a step's message, a reason, a label, a node's id, a problem's detail and its field errors,
// anything the API sent or another user wrote. Written raw, a step's message could retitle
// the window, clear the screen and print "run a: SUCCEEDED" in green over a run that failed.
// So every character a terminal acts on rather than shows is written as an escape a reader
// can see (escape), newlines and tabs included: a cell or a part of a line stays one line, and
// a tab cannot move a table's columns. Any other character, of any script, is kept.
//
// The escapes are printable ASCII and a backslash is kept as it is, so visible(visible(s)) is
// visible(s): a value escaped by a helper and again as a table cell reads the same.
//
// This is for the human-readable output. --output json writes the API's answers byte for
// byte (writeBody); so is content a user asks for as such, to pipe or to keep, when stdout is
// not a terminal: there it is not shown among this program's lines.
func visible(s string) string { return escape(s, false) }

// visibleLines is text this program did not write printed as a block of lines, as a step's
// message is when a run ended: visible, but its newlines and tabs kept (a CRLF read as a
// newline), and every line after the first begun with indent, so that no line of it starts
// where this program's own lines do.
func visibleLines(s, indent string) string {
	s = strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	return strings.ReplaceAll(escape(s, true), "\n", "\n"+indent)
}

// escape writes out, as Go would in a string literal, what a terminal would act on: the C0
// controls and DEL (\x1b, \a, \r, \x7f), the C1 controls U+0080–U+009F (\u009b is CSI to
// a terminal that takes 8-bit controls), and the bidirectional embeddings, overrides and
// isolates U+202A–U+202E and U+2066–U+2069 (\u202e), which reorder the rest of a line so that
// it reads as something else. A byte that is not UTF-8 is written \xNN. With lines, newlines
// and tabs are kept.
func escape(s string, lines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case lines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(controlEscape(r))
		case r >= 0x80 && r <= 0x9f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// controlEscape is a C0 control or DEL as Go writes it: the short form where there is one.
func controlEscape(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	return fmt.Sprintf(`\x%02x`, r)
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
		out = append(out, visible(role+"="+assigned[role]))
	}
	return strings.Join(out, ", ")
}

// needs is a set of labels, or "(any node)".
func needs(labels []string) string {
	if len(labels) == 0 {
		return "(any node)"
	}
	return visible(strings.Join(labels, ","))
}

// unmetLines are a refusal's roles and what they need that no node has.
func unmetLines(unmet []client.Unmet) []string {
	var out []string
	for _, u := range unmet {
		out = append(out, fmt.Sprintf("role %s needs %s", visible(u.Role), needs(u.Needs)))
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

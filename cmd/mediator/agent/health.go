package agent

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"mediator/shared/client"
)

// ellipsis marks text cut to fit: a message whose one line was longer than a message may be,
// an unhealthy reason longer than a heartbeat carries.
const ellipsis = "…"

// How the agent tells a failure of the machine from a failure of the test. A failed report
// says "infra" when the machine could not run the step:
//   - the step could not start on it: the program (argv[0]) or the spec's workdir does not
//     exist on this node, the step's directory, output file, process group or cgroup could not
//     be made, the process could not be spawned;
//   - the step failed while the filesystem of the work dir, or of its working directory, had
//     less room than --min-free asks (no space or no inode left, with --min-free 0);
//   - the step exited with one of its spec's infra_exit_codes: a lab's scripts say "the board
//     is broken, not the test" this way.
// Everything else is a test failure, which never counts against the node: a spec the agent
// cannot read (the submitter's), names that meet in the step's environment, a bad
// MEDIATOR_OUTPUTS, a timeout, any other exit — and a step the lease guard dropped
// (lease_lost): the agent cannot tell its own network from an outage of the API, and the API
// counts a lease that was in fact lost itself. A cmd runs through /bin/sh, so a command
// missing there is the shell's exit 127: list 127 in infra_exit_codes to count it against the
// machine.

// ClassifyExit is the failure kind of a step that ran and exited unsuccessfully (code nil:
// its status could not be had), and what the report's message says of it first: infra when
// the code is one of infraCodes, or when noSpace says a filesystem it used is full.
func ClassifyExit(code *int, infraCodes []int, noSpace string) (failure, note string) {
	switch {
	case code != nil && slices.Contains(infraCodes, *code):
		return client.FailureInfra, fmt.Sprintf("exit %d is one of the spec's infra_exit_codes: counted against the node, not the test", *code)
	case noSpace != "":
		return client.FailureInfra, noSpace + ": counted against the node, not the test"
	}
	return "", ""
}

// Defaults of the agent's own checks of its machine.
const (
	DefaultMinFreeBytes   = 1 << 30 // 1 GiB
	DefaultMinFreePercent = 5.0
	DefaultMinFreeInodes  = 1 << 16
	// MaxUnhealthyBytes bounds a heartbeat's unhealthy reason, as the API does.
	MaxUnhealthyBytes = 512
)

// MinFree is the least room the work dir's filesystem may have before the node quarantines
// itself. Free space is too little below the smaller of Bytes and Percent of the filesystem,
// free inodes below the smaller of Inodes and Percent of its inodes; a zero is no limit of
// its own, and Off none at all.
type MinFree struct {
	Bytes   uint64
	Percent float64
	Inodes  uint64
	Off     bool
}

// DefaultMinFree is 1 GiB or 5 % of the filesystem, whichever is smaller, and 65,536 inodes
// or 5 % of them, whichever is smaller: on a small card 5 % is the limit, on a large disk
// 1 GiB.
var DefaultMinFree = MinFree{Bytes: DefaultMinFreeBytes, Percent: DefaultMinFreePercent, Inodes: DefaultMinFreeInodes}

// ParseMinFree reads --min-free: a size ("2GiB", "500MB", "1048576"), which replaces the
// bytes and keeps 5 % for inodes; a percentage ("10%"), the one limit for both; or 0, no check.
func ParseMinFree(s string) (MinFree, error) {
	s = strings.TrimSpace(s)
	if s == "0" || s == "0%" {
		return MinFree{Off: true}, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 || v > 100 {
			return MinFree{}, fmt.Errorf("%q: a percentage must be above 0 and at most 100", s)
		}
		return MinFree{Percent: v}, nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return MinFree{}, err
	}
	return MinFree{Bytes: n, Percent: DefaultMinFreePercent, Inodes: DefaultMinFreeInodes}, nil
}

// limit is the smaller of an absolute limit and a share of total; a zero is no limit of its own.
func limit(abs uint64, percent float64, total uint64) uint64 {
	share := uint64(percent / 100 * float64(total))
	switch {
	case abs == 0:
		return share
	case percent == 0:
		return abs
	}
	return min(abs, share)
}

// Space is a filesystem's room as statfs gives it: what an unprivileged writer may still use.
type Space struct {
	FreeBytes, TotalBytes   uint64
	FreeInodes, TotalInodes uint64 // TotalInodes 0: the filesystem counts none (btrfs)
}

// Check says why space is too little for m, or "" when it is enough; dir names the place.
func (m MinFree) Check(dir string, space Space) string {
	if m.Off {
		return ""
	}
	if l := limit(m.Bytes, m.Percent, space.TotalBytes); space.FreeBytes < l || space.FreeBytes == 0 {
		return fmt.Sprintf("low disk space under %s: %s free of %s, below the %s --min-free asks for",
			dir, FormatSize(space.FreeBytes), FormatSize(space.TotalBytes), FormatSize(l))
	}
	if space.TotalInodes > 0 {
		if l := limit(m.Inodes, m.Percent, space.TotalInodes); space.FreeInodes < l || space.FreeInodes == 0 {
			return fmt.Sprintf("low free inodes under %s: %d free of %d, below the %d --min-free asks for",
				dir, space.FreeInodes, space.TotalInodes, l)
		}
	}
	return ""
}

// Full says why a filesystem is full — no space or no inode left to an unprivileged writer —
// or "".
func (s Space) Full(dir string) string {
	switch {
	case s.TotalBytes > 0 && s.FreeBytes == 0:
		return "no space left on the filesystem of " + dir
	case s.TotalInodes > 0 && s.FreeInodes == 0:
		return "no inode left on the filesystem of " + dir
	}
	return ""
}

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseSize reads a size: a whole number of bytes, or a number with a unit (KiB, MiB, GiB,
// TiB; KB, MB, GB, TB; K, M, G, T as the binary ones).
func ParseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	mult, num := uint64(1), s
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			mult, num = u.mult, strings.TrimSpace(n)
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*float64(mult) >= 1<<63 {
		return 0, fmt.Errorf("%q is not a size (a number of bytes, or with a unit: 512MiB, 2GiB, 1GB)", s)
	}
	return uint64(v * float64(mult)), nil
}

// FormatSize is a size in its largest binary unit: "1.0 GiB", "512 B".
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// Reason is what a heartbeat may carry as the node's unhealthy reason: the last line of out
// that is not blank, as printable text of at most MaxUnhealthyBytes, or fallback when out has
// none.
func Reason(out []byte, fallback string) string {
	var line string
	for l := range strings.SplitSeq(strings.ReplaceAll(string(out), "\r", "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			line = l
		}
	}
	line = strings.TrimSpace(printable(line))
	if line == "" {
		line = printable(fallback)
	}
	if len(line) > MaxUnhealthyBytes {
		end := MaxUnhealthyBytes - len(ellipsis)
		for end > 0 && !utf8.RuneStart(line[end]) {
			end--
		}
		line = line[:end] + ellipsis
	}
	return line
}

// printable is s as valid UTF-8 with every character that is not printable (controls, tabs,
// bidirectional overrides, what is not UTF-8) made a space.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
}

package agent

import (
	"strings"
	"testing"

	"mediator/shared/client"
)

// The machine's failures are infra, by the spec's exit codes or for want of room; any other
// exit is the test's.
func TestClassifyExit(t *testing.T) {
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		code    *int
		infra   []int
		noSpace string
		want    string
		says    string
	}{
		{code(1), nil, "", "", ""},
		{code(75), []int{75, 127}, "", client.FailureInfra, "exit 75 is one of the spec's infra_exit_codes"},
		{code(127), []int{75}, "", "", ""},
		{code(137), []int{137}, "", client.FailureInfra, "exit 137"},
		{nil, []int{1}, "", "", ""},
		{code(2), nil, "no space left on the filesystem of /w", client.FailureInfra, "no space left on the filesystem of /w: counted against the node"},
	} {
		got, note := ClassifyExit(tc.code, tc.infra, tc.noSpace)
		if got != tc.want || (tc.says == "") != (note == "") || !strings.Contains(note, tc.says) {
			t.Errorf("%v %v %q: %q %q, want %q saying %q", tc.code, tc.infra, tc.noSpace, got, note, tc.want, tc.says)
		}
	}
}

func TestParseMinFree(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MinFree
		err  bool
	}{
		{"2GiB", MinFree{Bytes: 2 << 30, Percent: 5, Inodes: 1 << 16}, false},
		{"500MB", MinFree{Bytes: 500e6, Percent: 5, Inodes: 1 << 16}, false},
		{"1048576", MinFree{Bytes: 1 << 20, Percent: 5, Inodes: 1 << 16}, false},
		{"10%", MinFree{Percent: 10}, false},
		{"0", MinFree{Off: true}, false},
		{"0%", MinFree{Off: true}, false},
		{"101%", MinFree{}, true},
		{"-1%", MinFree{}, true},
		{"lots", MinFree{}, true},
		{"-5GiB", MinFree{}, true},
	} {
		got, err := ParseMinFree(tc.in)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("%q: %+v %v, want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// By default the limit is the smaller of 1 GiB and 5 %: on a 4 GiB card 5 % (about 205 MiB),
// on a 1 TiB disk 1 GiB; inodes likewise, of 65,536 and 5 %.
func TestMinFreeIsTheSmallerOfTheSizeAndTheShare(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		m     MinFree
		space Space
		says  string // "" for enough room
	}{
		{DefaultMinFree, Space{FreeBytes: 300 << 20, TotalBytes: 4 * gib}, ""},
		{DefaultMinFree, Space{FreeBytes: 200 << 20, TotalBytes: 4 * gib}, "low disk space under /w: 200.0 MiB free of 4.0 GiB, below the 204.8 MiB"},
		{DefaultMinFree, Space{FreeBytes: 2 * gib, TotalBytes: 1024 * gib}, ""},
		{DefaultMinFree, Space{FreeBytes: gib - 1, TotalBytes: 1024 * gib}, "low disk space"},
		{DefaultMinFree, Space{FreeBytes: gib, TotalBytes: 2 * gib, FreeInodes: 499, TotalInodes: 10000}, "low free inodes under /w: 499 free of 10000, below the 500"},
		{DefaultMinFree, Space{FreeBytes: gib, TotalBytes: 2 * gib, FreeInodes: 70000, TotalInodes: 10_000_000}, ""},
		{DefaultMinFree, Space{FreeBytes: gib, TotalBytes: 2 * gib, FreeInodes: 60000, TotalInodes: 10_000_000}, "low free inodes"},
		{DefaultMinFree, Space{FreeBytes: gib, TotalBytes: 2 * gib, FreeInodes: 0, TotalInodes: 0}, ""}, // counts no inodes
		{MinFree{Percent: 50}, Space{FreeBytes: gib, TotalBytes: 2 * gib}, ""},
		{MinFree{Percent: 50}, Space{FreeBytes: gib - 1, TotalBytes: 2 * gib}, "low disk space"},
		{MinFree{Off: true}, Space{FreeBytes: 0, TotalBytes: 2 * gib}, ""},
		{MinFree{Percent: 1}, Space{FreeBytes: 0, TotalBytes: 10}, "low disk space"}, // nothing free is never enough
	} {
		got := tc.m.Check("/w", tc.space)
		if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
			t.Errorf("%+v %+v: %q, want %q", tc.m, tc.space, got, tc.says)
		}
	}
	// 5 % of 10,000 inodes is 500: 1,000 free are enough.
	if got := DefaultMinFree.Check("/w", Space{FreeBytes: gib, TotalBytes: 2 * gib, FreeInodes: 1000, TotalInodes: 10000}); got != "" {
		t.Errorf("1000 of 10000 inodes: %q", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "512": 512, "2GiB": 2 << 30, "2G": 2 << 30, "1.5KiB": 1536, "3MB": 3e6, "1 TiB": 1 << 40, "7B": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "1XB", "1e30"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// A reason is one printable line, the last the command wrote, bounded.
func TestReasonIsTheLastLinePrintableAndBounded(t *testing.T) {
	for _, tc := range []struct{ out, fallback, want string }{
		{"checking usb\nhub 1-1 missing\n\n", "x", "hub 1-1 missing"},
		{"a\r\nb\r\n", "x", "b"},
		{"  \n", "exit 1", "exit 1"},
		{"\x1b[31mred\x1b[0m\tand\u202etabs", "x", "[31mred [0m and tabs"},
		{"bad \xff byte", "x", "bad   byte"},
	} {
		if got := Reason([]byte(tc.out), tc.fallback); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.out, got, tc.want)
		}
	}
	long := Reason([]byte(strings.Repeat("é", 600)), "")
	if len(long) > MaxUnhealthyBytes || !strings.HasSuffix(long, ellipsis) || !strings.HasPrefix(long, "éé") {
		t.Fatalf("%d bytes: %q", len(long), long)
	}
}

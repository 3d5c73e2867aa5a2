//go:build linux

package agent

import (
	"fmt"
	"mediator/shared/wire"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRotateKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	var names []string
	for i := range 6 {
		name := OutputFile("run", fmt.Sprintf("s%d", i), 1)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	// s0 is the oldest but being written: it stays, and counts among those kept.
	if err := Rotate(dir, 3, 0, map[string]bool{names[0]: true}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{names[0], names[4], names[5], "notes.txt"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// The outputs kept are bounded by their total size as well: the oldest go first until the rest
// fit, a file being written counting towards the bound and never removed.
func TestRotateKeepsTheNewestThatFitTheBytes(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	var names []string
	for i, size := range []int{100, 10, 40, 30, 20} {
		name := OutputFile("run", fmt.Sprintf("s%d", i), 1)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Repeat("x", size)), 0o640); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	// s0 (100 bytes, the oldest) is being written: it stays and leaves 60 of the 160 bytes;
	// s4 (20) and s3 (30) fit them, s2 (40) would not, and it and all older go.
	if err := Rotate(dir, 100, 160, map[string]bool{names[0]: true}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{names[0], names[3], names[4]}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	// A newest file over the bound by itself goes too, once it is written.
	if err := Rotate(dir, 100, 10, nil); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %v, want none", entries)
	}
}

func TestOutputsAppendEachTryAndTailOnlyItsOwn(t *testing.T) {
	o := &outputs{dir: t.TempDir(), keep: 10, busy: map[string]int{}}
	f, begin, from, err := o.open("r", "s", 1, "=== try 1\n")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "first try\n")
	o.done(f)
	if begin != 0 || from != int64(len("=== try 1\n")) {
		t.Fatalf("the first try begins at %d, its output at %d", begin, from)
	}
	f, begin, from, err = o.open("r", "s", 1, "=== try 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if begin != int64(len("=== try 1\nfirst try\n")) || from != begin+int64(len("=== try 2\n")) {
		t.Fatalf("the second try begins at %d, its output at %d", begin, from)
	}
	fmt.Fprint(f, "second try\n")
	if got, _ := Tail(f, from, 1000); got != "second try\n" {
		t.Fatalf("the tail of the second try is %q", got)
	}
	o.done(f)
	all, _ := os.ReadFile(f.Name())
	if string(all) != "=== try 1\nfirst try\n=== try 2\nsecond try\n" {
		t.Fatalf("the file holds %q", all)
	}
	if len(o.busy) != 0 {
		t.Fatalf("busy after done: %v", o.busy)
	}
}

func TestTailAndText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	// "é" is two bytes: a tail of 5 bytes starts inside one.
	if err := os.WriteFile(path, []byte("aaéé\x00é\xffz"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Tail(f, 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got != "é?é?z" && got != "?é?z" {
		t.Fatalf("tail %q", got)
	}
	if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > 7 {
		t.Fatalf("tail %q is not text a report takes", got)
	}
	if got, _ := Tail(f, 100, 7); got != "" {
		t.Fatalf("nothing past from: %q", got)
	}
	// At most limit bytes, the end kept, never a character cut.
	long := strings.Repeat("ü", 3000) // 6000 bytes
	s := Text([]byte(long), wire.MaxMessageBytes, false)
	if len(s) > wire.MaxMessageBytes || !utf8.ValidString(s) || !strings.HasSuffix(long, s) {
		t.Fatalf("Text kept %d bytes, valid %v", len(s), utf8.ValidString(s))
	}
	m := Message([]string{"timed out after 1s"}, []byte(long), false)
	if len(m) > wire.MaxMessageBytes || !strings.HasPrefix(m, "timed out after 1s\n…") || !utf8.ValidString(m) {
		t.Fatalf("Message: %d bytes: %q…", len(m), m[:40])
	}
}

// A message is the output's last lines, whole: never begun inside a line (or a word), always
// text a report takes, at most the limit.
func TestLastLinesCutAtALineBoundary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		out   string
		limit int
		cut   bool
		want  string
	}{
		{"all of it fits", "one\ntwo\n", 100, false, "one\ntwo"},
		{"exactly", "one\ntwo", 7, false, "one\ntwo"},
		{"the first line does not fit", "first line\nsecond\nerror: it broke\n", 22, false, "second\nerror: it broke"},
		{"a window that begins a line", "aaaa\nbb\ncc\n", 5, false, "bb\ncc"},
		{"a window one byte into a line", "aaaa\nbbb\ncc\n", 5, false, "cc"},
		{"cut output: its first line is not whole", "tail of a line\nwhole\n", 100, true, "whole"},
		{"cut output, one partial line", "ord and more words", 100, true, "…and more words"},
		{"the last line alone is too long", "ok\n" + "the error is " + strings.Repeat("x", 50) + " here", 20, false, "…here"},
		{"the last line's words all too long", "ok\n" + strings.Repeat("y", 50), 10, false, "…yyyyyyy"},
		{"trailing newlines and CRs left out", "done\r\n\n\n", 100, false, "done"},
		{"NUL and bytes that are not UTF-8", "a\x00b\xffc\n", 100, false, "a?b?c"},
		{"a character is never cut", "é\n" + strings.Repeat("é", 10), 9, false, "…ééé"},
		{"nothing", "\n\n", 100, false, ""},
		{"no room", "abc", 0, false, ""},
	} {
		got := LastLines([]byte(tc.out), tc.limit, tc.cut)
		if got != tc.want {
			t.Errorf("%s: LastLines(%q, %d, %v) = %q, want %q", tc.name, tc.out, tc.limit, tc.cut, got, tc.want)
		}
		if len(got) > max(tc.limit, 0) || !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
			t.Errorf("%s: %q is not a message: %d bytes of at most %d", tc.name, got, len(got), tc.limit)
		}
	}
	// However long, a message keeps the end, and begins at a line's start.
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "line %d of the step's output\n", i)
	}
	b.WriteString("error: the last thing it said\n")
	m := Message(nil, []byte(b.String()), false)
	if len(m) > wire.MaxMessageBytes || !strings.HasSuffix(m, "\nerror: the last thing it said") || !strings.HasPrefix(m, "line ") ||
		!strings.Contains(b.String(), "\n"+m+"\n") {
		t.Fatalf("Message kept %d bytes: %q … %q", len(m), m[:30], m[len(m)-30:])
	}
	m = Message([]string{"timed out", "log upload incomplete: S3 answered 500"}, []byte(b.String()), true)
	if !strings.HasPrefix(m, "timed out\nlog upload incomplete: S3 answered 500\nline ") || len(m) > wire.MaxMessageBytes {
		t.Fatalf("Message with reasons: %q…", m[:80])
	}
}

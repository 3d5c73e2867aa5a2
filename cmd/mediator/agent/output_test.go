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
	if err := Rotate(dir, 3, map[string]bool{names[0]: true}); err != nil {
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

func TestOutputsAppendEachTryAndTailOnlyItsOwn(t *testing.T) {
	o := &outputs{dir: t.TempDir(), keep: 10, busy: map[string]int{}}
	f, from, err := o.open("r", "s", 1, "=== try 1\n")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "first try\n")
	o.done(f)
	f, from, err = o.open("r", "s", 1, "=== try 2\n")
	if err != nil {
		t.Fatal(err)
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
	m := withReason("timed out after 1s", long)
	if len(m) > wire.MaxMessageBytes || !strings.HasPrefix(m, "timed out after 1s\n") || !utf8.ValidString(m) {
		t.Fatalf("withReason: %d bytes: %q…", len(m), m[:40])
	}
}

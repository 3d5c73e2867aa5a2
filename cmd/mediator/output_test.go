package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// visible writes every control a terminal would act on as an escape a reader can see, keeps
// every other character, and reads the same when applied twice.
func TestVisibleEscapesWhatATerminalActsOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"make test: 3 failed, see out/report.txt", "make test: 3 failed, see out/report.txt"},
		{`C:\builds\a "quoted" 100%`, `C:\builds\a "quoted" 100%`}, // a backslash is text
		{"héllo 日本語 → ×2 … 👩‍💻 ∑ Ω\u00a0x", "héllo 日本語 → ×2 … 👩‍💻 ∑ Ω\u00a0x"},
		// C0 controls and DEL.
		{"\x1b]0;pwned\a\x1b[2J\x1b[31mFAKE: run SUCCEEDED", `\x1b]0;pwned\a\x1b[2J\x1b[31mFAKE: run SUCCEEDED`},
		{"a\rb\nc\td\x00e\bf\fg\vh\x7fi\x01", `a\rb\nc\td\x00e\bf\fg\vh\x7fi\x01`},
		// C1 controls: U+009B is CSI, U+009D OSC, U+0085 NEL.
		{"\u0080 \u0085 \u009b31m \u009d0;t\u009c \u009f", `\u0080 \u0085 \u009b31m \u009d0;t\u009c \u009f`},
		// Bidi embeddings, overrides and isolates; their neighbours are text.
		{"\u202a\u202b\u202c\u202d\u202e|\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u202e|\u2066\u2067\u2068\u2069`},
		{"invoice\u202efdp.exe", `invoice\u202efdp.exe`},
		{"\u2029\u202f\u2065\u206a\u200d", "\u2029\u202f\u2065\u206a\u200d"},
		// Bytes that are not UTF-8 are written as bytes; the valid text around them is kept.
		{"ok\xff\xfe é \xe2\x80", `ok\xff\xfe é \xe2\x80`},
	} {
		got := visible(tc.in)
		if got != tc.want {
			t.Errorf("visible(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := visible(got); again != got {
			t.Errorf("visible of %q again = %q", got, again)
		}
	}
	// Every character: a control or a bidi override comes out escaped, all else as it was.
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		got := visible(s)
		if len(acting(s, "")) > 0 {
			if len(acting(got, "")) > 0 || !strings.HasPrefix(got, `\`) {
				t.Fatalf("visible(%q) = %q: not escaped", s, got)
			}
		} else if got != s {
			t.Fatalf("visible(%q) = %q: changed", s, got)
		}
	}
}

// visibleLines keeps a block's lines and tabs, reads CRLF as a newline, indents every line
// after the first, and escapes the rest as visible does.
func TestVisibleLinesEscapesButKeepsLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"one line", "one line"},
		{"first\nsecond\r\n\tthird\n\n", "first\n  second\n  \tthird"},
		{"ok\n\x1b[1A\x1b[2Krun a: SUCCEEDED\rx\u009b\u202e", "ok\n  \\x1b[1A\\x1b[2Krun a: SUCCEEDED\\rx\\u009b\\u202e"},
	} {
		if got := visibleLines(tc.in, "  "); got != tc.want {
			t.Errorf("visibleLines(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A table writes every cell visible: a cell with a newline, a tab or an escape sequence in it
// stays one line, in its column.
func TestTableCellsAreEscapedOnTheirLine(t *testing.T) {
	t.Parallel()
	tb := &table{header: []string{"NODE", "LABELS", "STATE"}, coloured: []int{2}}
	tb.add("n1", "a\tb\nc\x1b[2J", "idle")
	tb.add("n2", "", "\x1b[32mleased")
	var b bytes.Buffer
	tb.write(&b, false)
	want := "NODE  LABELS          STATE\n" +
		"n1    a\\tb\\nc\\x1b[2J  idle\n" +
		"n2    -               \\x1b[32mleased\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	// With colour, the painting is this program's; the cell's own escapes are still text.
	b.Reset()
	tb.write(&b, true)
	if !strings.Contains(b.String(), "\x1b[39m\\x1b[32mleased\x1b[0m") {
		t.Fatalf("a coloured cell:\n%q", b.String())
	}
}

// oneLine cuts a message at the start of a character, never through one.
func TestOneLineCutsBetweenCharacters(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 59) + "éééé"
	if got := oneLine(long); got != strings.Repeat("a", 59)+"…" {
		t.Fatalf("oneLine(%q) = %q", long, got)
	}
	if got := oneLine("first\nsecond"); got != "first…" {
		t.Fatalf("oneLine = %q", got)
	}
}

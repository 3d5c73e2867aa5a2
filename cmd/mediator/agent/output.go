//go:build linux

package agent

import (
	"cmp"
	"fmt"
	"io"
	"mediator/shared/wire"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"
)

// outputs keeps every step's full output on the node, one file per run, step and attempt
// (a retry within the attempt appends to it), and only the newest files: at most keep of them,
// and at most keepBytes in all (0: no bound), so that the outputs cannot fill the disk.
type outputs struct {
	dir       string
	keep      int
	keepBytes int64

	mu   sync.Mutex
	busy map[string]int // files being written, never rotated away
}

// OutputFile is the name of a step's output file under the output directory.
func OutputFile(runID, stepID string, attempt int) string {
	return fmt.Sprintf("%s+%s+%d.log", runID, stepID, attempt)
}

// open opens a step's output file for appending, after a header line, and returns it with the
// offsets where this try begins (its header: where its log begins) and where its output
// begins (after the header). The agent reads the file back through the same descriptor, never
// by name: a step that put a FIFO or a link in its place cannot hold the agent up or send it
// elsewhere. Such a file found at the name is replaced.
func (o *outputs) open(runID, stepID string, attempt int, header string) (f *os.File, begin, from int64, err error) {
	name := OutputFile(runID, stepID, attempt)
	if f, err = openOutput(filepath.Join(o.dir, name)); err != nil {
		return nil, 0, 0, err
	}
	fi, err := f.Stat()
	if err == nil {
		begin = fi.Size()
		_, err = io.WriteString(f, header)
	}
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	o.mu.Lock()
	o.busy[name]++
	o.mu.Unlock()
	o.rotate()
	return f, begin, begin + int64(len(header)), nil
}

// openOutput opens path to append to and read back, as a regular file: anything else there (a
// FIFO, a device, a link) is removed and a new file made.
func openOutput(path string) (*os.File, error) {
	const flags = os.O_RDWR | os.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	for range 3 {
		f, err := os.OpenFile(path, flags|os.O_CREATE, 0o640)
		if err == nil {
			fi, err := f.Stat()
			if err == nil && fi.Mode().IsRegular() {
				return f, nil
			}
			f.Close()
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s: something keeps replacing it with what is not a regular file", path)
}

// done marks a step's output file as no longer written, and rotates: a step that wrote much
// must not leave the outputs over their bound until the next one starts.
func (o *outputs) done(f *os.File) {
	name := filepath.Base(f.Name())
	_ = f.Close()
	o.mu.Lock()
	if o.busy[name]--; o.busy[name] <= 0 {
		delete(o.busy, name)
	}
	o.mu.Unlock()
	o.rotate()
}

func (o *outputs) rotate() {
	o.mu.Lock()
	busy := names(o.busy)
	o.mu.Unlock()
	_ = Rotate(o.dir, o.keep, o.keepBytes, busy)
}

func names(m map[string]int) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// Rotate removes the oldest output files of dir (by when they were last written) beyond the
// newest keep, or beyond maxBytes in all (0: no bound), sparing those still being written,
// which count towards both.
func Rotate(dir string, keep int, maxBytes int64, busy map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type file struct {
		name string
		mod  int64
		size int64
	}
	var files []file
	var busyBytes int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if busy[e.Name()] {
			busyBytes += fi.Size()
			continue
		}
		files = append(files, file{e.Name(), fi.ModTime().UnixNano(), fi.Size()})
	}
	keep = max(keep-len(busy), 0)
	slices.SortFunc(files, func(a, b file) int {
		return cmp.Or(cmp.Compare(b.mod, a.mod), strings.Compare(b.name, a.name))
	})
	kept, total := 0, busyBytes
	for kept < len(files) && kept < keep && (maxBytes <= 0 || total+files[kept].size <= maxBytes) {
		total += files[kept].size
		kept++
	}
	var first error
	for _, f := range files[kept:] {
		if err := os.Remove(filepath.Join(dir, f.name)); err != nil && !os.IsNotExist(err) && first == nil {
			first = err
		}
	}
	return first
}

// Tail is the last n bytes of f from offset from on, as text the API takes.
func Tail(f *os.File, from int64, n int) (string, error) {
	b, cut, err := tailBytes(f, from, n)
	return Text(b, n, cut), err
}

// tailBytes is the last n bytes of f from offset from on, and whether they begin after from
// (in the middle of the output, perhaps of a line or a character).
func tailBytes(f *os.File, from int64, n int) ([]byte, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	start := max(from, fi.Size()-int64(n))
	if start >= fi.Size() {
		return nil, false, nil
	}
	buf := make([]byte, fi.Size()-start)
	k, err := f.ReadAt(buf, start)
	if err != nil && err != io.EOF {
		return nil, false, err
	}
	return buf[:k], start > from, nil
}

// Text makes output fit a report: valid UTF-8 without NUL (the API refuses both), at most limit
// bytes, keeping the end. cut says the bytes begin mid-stream, perhaps inside a character.
func Text(b []byte, limit int, cut bool) string {
	if cut {
		// A character cut in two by the tail is dropped, not turned into a replacement.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	// "?" for what is not text: one byte for at least one, so the text never grows.
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.ReplaceAll(s, "\x00", "?")
	if len(s) <= limit {
		return s
	}
	s = s[len(s)-limit:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// Message is a report's message: what the agent has to say first (why the step was stopped, an
// upload that did not finish), one per line, then the last lines of the step's output, out,
// as many as fit wire.MaxMessageBytes. cut says out begins in the middle of the output. What
// a script prints last — its error — is what people read first, so the end is kept, and whole
// lines only: a message that began inside a word would misquote the step.
func Message(why []string, out []byte, cut bool) string {
	head := strings.Join(why, "\n")
	if len(out) == 0 {
		return Text([]byte(head), wire.MaxMessageBytes, false)
	}
	if head == "" {
		return LastLines(out, wire.MaxMessageBytes, cut)
	}
	room := wire.MaxMessageBytes - len(head) - 1
	if room <= 0 {
		return Text([]byte(head), wire.MaxMessageBytes, false)
	}
	if lines := LastLines(out, room, cut); lines != "" {
		return head + "\n" + lines
	}
	return head
}

// LastLines is the end of out as text a report takes (valid UTF-8, no NUL), at most limit
// bytes, beginning at the start of a line; cut says out begins in the middle of the output,
// so its first line is not whole. When not even the last line fits, it is cut after a space
// and begun with "…" (inside a word only when the limit holds no space at all: a line of
// base64). The newlines the output ends with are left out.
func LastLines(out []byte, limit int, cut bool) string {
	// "?" for what is not text: one byte for at least one, so the text never grows.
	s := strings.ToValidUTF8(string(out), "?")
	s = strings.ReplaceAll(s, "\x00", "?")
	s = strings.TrimRight(s, "\r\n")
	if limit <= 0 || s == "" {
		return ""
	}
	start := max(len(s)-limit, 0)
	if (start == 0 && !cut) || (start > 0 && s[start-1] == '\n') {
		return s[start:]
	}
	if i := strings.IndexByte(s[start:], '\n'); i >= 0 {
		return s[start+i+1:]
	}
	// The last line alone is longer than limit (or is all there is of a cut line).
	room := limit - len(ellipsis)
	if room <= 0 {
		return ""
	}
	line := s[start:]
	if len(line) > room {
		line = line[len(line)-room:]
	}
	if i := strings.IndexAny(line, " \t"); i >= 0 && i+1 < len(line) {
		return ellipsis + line[i+1:]
	}
	for len(line) > 0 && !utf8.RuneStart(line[0]) {
		line = line[1:]
	}
	return ellipsis + line
}

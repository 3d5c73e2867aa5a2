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
// (a retry within the attempt appends to it), and only the newest files.
type outputs struct {
	dir  string
	keep int

	mu   sync.Mutex
	busy map[string]int // files being written, never rotated away
}

// OutputFile is the name of a step's output file under the output directory.
func OutputFile(runID, stepID string, attempt int) string {
	return fmt.Sprintf("%s+%s+%d.log", runID, stepID, attempt)
}

// open opens a step's output file for appending, after a header line, and returns it with the
// offset where this try's output begins. The agent reads the tail back through the same
// descriptor, never by name: a step that put a FIFO or a link in its place cannot hold the
// agent up or send it elsewhere. Such a file found at the name is replaced.
func (o *outputs) open(runID, stepID string, attempt int, header string) (*os.File, int64, error) {
	name := OutputFile(runID, stepID, attempt)
	f, err := openOutput(filepath.Join(o.dir, name))
	if err != nil {
		return nil, 0, err
	}
	if _, err := io.WriteString(f, header); err != nil {
		f.Close()
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	o.mu.Lock()
	o.busy[name]++
	busy := names(o.busy)
	o.mu.Unlock()
	_ = Rotate(o.dir, o.keep, busy)
	return f, fi.Size(), nil
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

// done marks a step's output file as no longer written.
func (o *outputs) done(f *os.File) {
	name := filepath.Base(f.Name())
	_ = f.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy[name]--; o.busy[name] <= 0 {
		delete(o.busy, name)
	}
}

func names(m map[string]int) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// Rotate removes the oldest output files of dir (by when they were last written) beyond the
// newest keep, sparing those still being written.
func Rotate(dir string, keep int, busy map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type file struct {
		name string
		mod  int64
	}
	var files []file
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") || busy[e.Name()] {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		files = append(files, file{e.Name(), fi.ModTime().UnixNano()})
	}
	keep = max(keep-len(busy), 0)
	if len(files) <= keep {
		return nil
	}
	slices.SortFunc(files, func(a, b file) int {
		return cmp.Or(cmp.Compare(b.mod, a.mod), strings.Compare(b.name, a.name))
	})
	var first error
	for _, f := range files[keep:] {
		if err := os.Remove(filepath.Join(dir, f.name)); err != nil && !os.IsNotExist(err) && first == nil {
			first = err
		}
	}
	return first
}

// Tail is the last n bytes of f from offset from on, as text the API takes.
func Tail(f *os.File, from int64, n int) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	start := max(from, fi.Size()-int64(n))
	if start >= fi.Size() {
		return "", nil
	}
	buf := make([]byte, fi.Size()-start)
	k, err := f.ReadAt(buf, start)
	if err != nil && err != io.EOF {
		return "", err
	}
	return Text(buf[:k], n, start > from), nil
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

// withReason puts why first, then as much of the output's end as fits a message.
func withReason(reason, tail string) string {
	if tail == "" {
		return Text([]byte(reason), wire.MaxMessageBytes, false)
	}
	room := wire.MaxMessageBytes - len(reason) - 1
	if room <= 0 {
		return Text([]byte(reason), wire.MaxMessageBytes, false)
	}
	return reason + "\n" + Text([]byte(tail), room, true)
}

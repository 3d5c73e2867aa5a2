// Package agentlog reads what a `mediator agent` process logs (JSON, one record a line) record
// by record, for those who wait on what an agent says: the agent's tests and the demo.
package agentlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// ErrEnded: the log ended without the record waited for.
var ErrEnded = errors.New("the log ended")

// Log is an agent's log as read so far.
type Log struct {
	mu      sync.Mutex
	records []map[string]any
	lines   []string
	cursor  int  // the records Wait has consumed
	ended   bool // the output ended
	changed chan struct{}
	seen    func(map[string]any)
}

// New returns a Log that calls seen (when not nil) with each record as it is read, before
// anyone can wait on it.
func New(seen func(rec map[string]any)) *Log {
	return &Log{changed: make(chan struct{}), seen: seen}
}

// Read reads r to its end. A line that is not JSON becomes a record whose msg is the line, with
// "raw": true.
func (l *Log) Read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			rec = map[string]any{"msg": sc.Text(), "raw": true}
		}
		if l.seen != nil {
			l.seen(rec)
		}
		l.mu.Lock()
		l.records, l.lines = append(l.records, rec), append(l.lines, sc.Text())
		l.signal()
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.ended = true
	l.signal()
	l.mu.Unlock()
}

// signal wakes every waiter; the caller holds mu.
func (l *Log) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Wait consumes the records in order until one whose message begins with msg and whose
// attributes include attrs ("key", "value", ...), and returns it: ErrEnded when the log ends
// first, ctx's error when ctx ends first.
func (l *Log) Wait(ctx context.Context, msg string, attrs ...string) (map[string]any, error) {
	for {
		l.mu.Lock()
		for l.cursor < len(l.records) {
			rec := l.records[l.cursor]
			l.cursor++
			if Matches(rec, msg, attrs...) {
				l.mu.Unlock()
				return rec, nil
			}
		}
		changed, ended := l.changed, l.ended
		l.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("%w without %s", ErrEnded, describe(msg, attrs))
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("no %s yet: %w", describe(msg, attrs), ctx.Err())
		}
	}
}

// Index is the position of the first record with msg and attrs, whatever Wait consumed, or -1.
func (l *Log) Index(msg string, attrs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, rec := range l.records {
		if Matches(rec, msg, attrs...) {
			return i
		}
	}
	return -1
}

// Count is how many records have msg and attrs, whatever Wait consumed.
func (l *Log) Count(msg string, attrs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rec := range l.records {
		if Matches(rec, msg, attrs...) {
			n++
		}
	}
	return n
}

// Record is the record at i (see Index).
func (l *Log) Record(i int) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records[i]
}

// Text is the log as it was written.
func (l *Log) Text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Matches says whether rec's message begins with msg and its attributes include attrs.
func Matches(rec map[string]any, msg string, attrs ...string) bool {
	m, _ := rec["msg"].(string)
	if !strings.HasPrefix(m, msg) {
		return false
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		if fmt.Sprint(rec[attrs[i]]) != attrs[i+1] {
			return false
		}
	}
	return true
}

func describe(msg string, attrs []string) string {
	return strings.TrimSpace(fmt.Sprintf("%q %s", msg, strings.Join(attrs, " ")))
}

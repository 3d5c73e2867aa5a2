package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	locals3 "mediator/localdev/s3"
	"mediator/shared/client"
	"mediator/shared/wire"
)

// objects stands in for S3 behind presigned URLs: what a GET of each URL answers.
type objects map[string][]byte

func (o objects) get(_ context.Context, url string) ([]byte, error) {
	b, ok := o[url]
	if !ok {
		return nil, errURLExpired
	}
	return b, nil
}

// listing is a StepLog listing parts of log as chunks, each stored under its own URL.
func listing(o objects, state string, parts ...string) *client.StepLog {
	sl := &client.StepLog{Attempt: 1, State: state, Stored: true}
	var off int64
	for i, p := range parts {
		url := fmt.Sprintf("u/%d/%d", off, len(p))
		o[url] = []byte(p)
		sl.Chunks = append(sl.Chunks, client.LogChunk{Try: 1, Seq: i, Offset: off, Bytes: int64(len(p)), URL: url})
		off += int64(len(p))
	}
	return sl
}

// complete is sl once its step ended with every chunk stored: log's size and SHA-256 with it.
func complete(listed *client.StepLog, log string) *client.StepLog {
	sl := *listed
	sum := sha256.Sum256([]byte(log))
	h, n := hex.EncodeToString(sum[:]), int64(len(log))
	sl.Complete, sl.SHA256, sl.Bytes = true, &h, &n
	return &sl
}

func newStream(o objects) *logStream {
	return &logStream{key: "s/1", step: "s", attempt: 1, get: o.get, h: sha256.New()}
}

// Chunks are read in the order of their offsets, whatever the listing's order; a gap ends a
// read, and the next listing goes on from it; nothing is read twice.
func TestLogStreamJoinsChunksInOrder(t *testing.T) {
	o := objects{}
	full := listing(o, wire.Running, "=== header\n", "line 1\nli", "ne 2\n", "line 3\n")
	s := newStream(o)
	// The listing so far: chunks 0 and 2 (1 not yet listed), out of order.
	partial := &client.StepLog{State: wire.Running, Stored: true, Chunks: []client.LogChunk{full.Chunks[2], full.Chunks[0]}}
	got, err := s.advance(context.Background(), partial)
	if err != nil || string(got) != "=== header\n" {
		t.Fatalf("first read %q, %v", got, err)
	}
	got, err = s.advance(context.Background(), full)
	if err != nil || string(got) != "line 1\nline 2\nline 3\n" {
		t.Fatalf("second read %q, %v", got, err)
	}
	if got, _ := s.advance(context.Background(), full); len(got) != 0 {
		t.Fatalf("read again: %q", got)
	}
	if err := s.verify(complete(full, "=== header\nline 1\nline 2\nline 3\n")); err != nil {
		t.Fatal(err)
	}
	// A log whose bytes are not the ones its node hashed is an error, as is one of another size.
	if err := s.verify(complete(full, "=== header\nline 1\nline 2\nline 4\n")); err == nil || !strings.Contains(err.Error(), "does not match its SHA-256") {
		t.Fatalf("a mismatch: %v", err)
	}
	if err := s.verify(complete(full, "short")); err == nil || !strings.Contains(err.Error(), "is 32 bytes as read, but its node stored 5") {
		t.Fatalf("another size: %v", err)
	}
	// An incomplete log is not checked: there is nothing to check it against yet.
	if err := s.verify(full); err != nil {
		t.Fatal(err)
	}
}

func TestLogStreamRefusesWhatDoesNotAddUp(t *testing.T) {
	o := objects{}
	sl := listing(o, wire.Running, "abc", "def")
	o[sl.Chunks[1].URL] = []byte("de") // shorter than listed
	if _, err := newStream(o).advance(context.Background(), sl); err == nil || !strings.Contains(err.Error(), "holds 2 bytes, listed as 3") {
		t.Fatalf("a short chunk: %v", err)
	}
	s := newStream(o)
	s.off = 2 // read into a chunk the listing now begins elsewhere
	if _, err := s.advance(context.Background(), sl); err == nil || !strings.Contains(err.Error(), "changed under the reader") {
		t.Fatalf("a listing that moved: %v", err)
	}
	// A URL S3 refuses is reported as expired, with what was read before it kept.
	o = objects{}
	sl = listing(o, wire.Running, "abc", "def")
	delete(o, sl.Chunks[1].URL)
	s = newStream(o)
	got, err := s.advance(context.Background(), sl)
	if !errors.Is(err, errURLExpired) || string(got) != "abc" || s.off != 3 {
		t.Fatalf("expired: %q %v at %d", got, err, s.off)
	}
}

// A capped try while it runs: the head, then its live tail as it changes, then at its end the
// marker and the tail, of which only what the live tail did not show is printed. The stored
// log is what is checked.
func TestLogStreamFollowsALiveTail(t *testing.T) {
	var out strings.Builder
	for i := 1; i <= 400; i++ {
		fmt.Fprintf(&out, "line %d\n", i)
	}
	output := out.String()
	head := output[:1000]
	o := objects{}
	s := newStream(o)
	window := func(from, to int) *client.StepLog {
		sl := listing(o, wire.Running, head)
		url := fmt.Sprintf("live/%d-%d", from, to)
		o[url] = []byte(output[from:to])
		sl.Live = &client.LiveTail{Try: 1, Bytes: int64(to - from), URL: url}
		return sl
	}
	var printed []byte
	for _, w := range [][2]int{{1000, 1500}, {1200, 1700}, {1300, 1700}, {1500, 2100}} {
		got, err := s.advance(context.Background(), window(w[0], w[1]))
		if err != nil {
			t.Fatal(err)
		}
		printed = append(printed, got...)
	}
	// The end: the head, the marker, the last 600 bytes.
	end := len(output)
	tail := output[end-600:]
	marker := fmt.Sprintf("\n=== mediator: %d bytes of output left out here (LOG_MAX_BYTES_PER_STEP); the last 600 bytes follow ===\n", end-600-1000)
	final := complete(listing(o, wire.Succeeded, head, marker, tail[:300], tail[300:]), head+marker+tail)
	got, err := s.advance(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	printed = append(printed, got...)
	printed = append(printed, s.endLive()...)
	if err := s.verify(final); err != nil {
		t.Fatal(err)
	}
	// Between the live tail's last read (to 2100) and the stored tail (from end-600) the output
	// was never shown: the marker says so, then the tail.
	want := head + liveNotice + output[1000:2100] + marker + tail
	if string(printed) != want {
		t.Fatalf("printed\n%q\nwant\n%q", printed, want)
	}

	// Had the live tail been read up to the end, only the rest follows, without the marker.
	s = newStream(o)
	printed = nil
	for _, w := range [][2]int{{1000, 1500}, {end - 800, end - 20}} {
		got, _ := s.advance(context.Background(), window(w[0], w[1]))
		printed = append(printed, got...)
	}
	got, _ = s.advance(context.Background(), final)
	printed = append(printed, got...)
	printed = append(printed, s.endLive()...)
	want = head + liveNotice + output[1000:1500] + gapNotice + output[end-800:]
	if string(printed) != want {
		t.Fatalf("printed\n%q\nwant\n%q", printed, want)
	}
}

func TestResumeAndOverlap(t *testing.T) {
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, "line %02d\n", i)
	}
	ls := lines.String() // 160 bytes
	for _, tc := range []struct {
		shown, cur, want string
		ok               bool
	}{
		{ls[:100], ls[30:], ls[100:], true},       // the window moved on
		{ls, ls, "", true},                        // nothing new
		{ls[:100], ls[:100] + ls[:100], "", true}, // output that repeats: not printed again
		{ls[:100], "xyz", "xyz", false},           // a gap
		{"", "xyz", "xyz", false},                 // nothing shown to resume after
		{"abcdef", "defxyz", "defxyz", false},     // too short an overlap to trust
	} {
		got, ok := resume([]byte(tc.shown), []byte(tc.cur))
		if string(got) != tc.want || ok != tc.ok {
			t.Errorf("resume(%q, %q) = %q, %v; want %q, %v", tc.shown, tc.cur, got, ok, tc.want, tc.ok)
		}
	}
	// Longer than the anchor: the overlap is found by its longest match at the boundary.
	shown := strings.Repeat("a", anchorBytes) + strings.Repeat("b", 100)
	cur := strings.Repeat("b", 100) + "new"
	if got, ok := resume([]byte(shown), []byte(cur)); string(got) != "new" || !ok {
		t.Fatalf("resume across a short overlap: %q %v", got, ok)
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"abcabc", "abcd", 3}, {"aaaa", "aaab", 3}, {"xyz", "abc", 0}, {"abab", "abab", 4}, {"", "a", 0}, {"a", "", 0},
	} {
		if got := overlap([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("overlap(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// Several steps' logs: each under its header, a blank line between, a line ended where a log
// did not end one; the header again only when the step whose output follows changes.
func TestLogOutHeaders(t *testing.T) {
	var b bytes.Buffer
	o := &logOut{w: &b, headers: true, nl: true}
	o.begin("build/1", logHeader("build", 1, wire.Succeeded))
	o.write("build/1", "-", []byte("compiled\n"))
	o.begin("test/1", logHeader("test", 1, wire.Failed))
	o.write("test/1", "-", []byte("ran"))
	o.write("test/1", "-", []byte(" 3 tests"))
	o.write("lint/1", logHeader("lint", 1, ""), []byte("ok\n"))
	o.write("lint/1", logHeader("lint", 1, ""), nil)
	o.end()
	want := "==> step build, attempt 1: SUCCEEDED <==\ncompiled\n\n==> step test, attempt 1: FAILED <==\nran 3 tests\n\n==> step lint, attempt 1 <==\nok\n"
	if b.String() != want {
		t.Fatalf("wrote\n%q\nwant\n%q", b.String(), want)
	}
	// One step's log, not on a terminal: byte for byte, the last line as it is.
	b.Reset()
	o = &logOut{w: &b, nl: true}
	o.write("s/1", "-", []byte("\x1b[2Jraw\r\nno newline"))
	o.end()
	if b.String() != "\x1b[2Jraw\r\nno newline" {
		t.Fatalf("raw: %q", b.String())
	}
}

// On a terminal a log is shown visible: escapes written out, a CRLF a newline, and a
// character or a CRLF cut between two chunks put together again.
func TestVisibleWriterAcrossWrites(t *testing.T) {
	var b bytes.Buffer
	o := &logOut{w: &b, nl: true, vis: &visibleWriter{w: &b}}
	e := "é" // two bytes
	for _, part := range []string{"\x1b]0;owned\a", "caf" + e[:1], e[1:] + "\r", "\nnext\u202e\tline\r", "x\xff", "\n"} {
		o.write("s/1", "-", []byte(part))
	}
	o.write("s/1", "-", []byte("end"+e[:1]))
	o.end()
	want := `\x1b]0;owned\acafé` + "\n" + `next\u202e` + "\tline" + `\rx\xff` + "\nend" + `\xc3` + "\n"
	if b.String() != want {
		t.Fatalf("shown\n%q\nwant\n%q", b.String(), want)
	}
}

// Against the local S3, through URLs presigned as the log route presigns them: the chunks are
// read by plain GETs, joined and checked; an expired URL reads as expired, a missing live tail
// as nothing new.
func TestLogStreamReadsPresignedURLs(t *testing.T) {
	var ahead atomic.Int64
	srv, err := locals3.Start(t.Context(), locals3.Options{
		Buckets: []string{"logs"},
		Now:     func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c, p := srv.Client(), srv.PresignClient()
	parts := []string{"=== header\n", "line 1\n", strings.Repeat("x", 3<<20) + "\n"}
	sl := &client.StepLog{Attempt: 1, State: wire.Succeeded, Stored: true}
	var off int64
	for i, part := range parts {
		key := fmt.Sprintf("o/r/1/s/1/1/%08d", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String(key), Body: strings.NewReader(part)}); err != nil {
			t.Fatal(err)
		}
		g, err := p.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)}, s3.WithPresignExpires(5*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		sl.Chunks = append(sl.Chunks, client.LogChunk{Try: 1, Seq: i, Offset: off, Bytes: int64(len(part)), URL: g.URL})
		off += int64(len(part))
	}
	sl = complete(sl, strings.Join(parts, ""))
	get := httpFetch(&http.Client{Timeout: time.Minute})
	s := &logStream{key: "s/1", step: "s", attempt: 1, get: get, h: sha256.New()}
	got, err := s.advance(ctx, sl)
	if err != nil || string(got) != strings.Join(parts, "") {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if err := s.verify(sl); err != nil {
		t.Fatal(err)
	}
	// A live tail listed but rewritten away since reads as nothing new.
	g, _ := p.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String("o/r/1/s/1/1/live")})
	if got, err := s.showLive(ctx, &client.LiveTail{Try: 1, URL: g.URL}); err != nil || got != nil {
		t.Fatalf("a missing live tail: %q %v", got, err)
	}
	ahead.Store(int64(10 * time.Minute))
	if _, err := get(ctx, sl.Chunks[0].URL); !errors.Is(err, errURLExpired) {
		t.Fatalf("an expired URL: %v", err)
	}
}

// `mediator run` shows the end of a failed step's message, which ends with the error its
// script printed last, and where its whole log is.
func TestRunPointsToTheLogsOfAFailedStep(t *testing.T) {
	var b bytes.Buffer
	a := &app{environment: environment{stdout: &b, getenv: func(string) string { return "" }}}
	code := 2
	var msg strings.Builder
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&msg, "step line %d\r\n", i)
	}
	msg.WriteString("error: \x1b[31mboom\x1b[0m\n")
	m := msg.String()
	r := client.Run{RunID: "a", Steps: []client.Step{
		{ID: "build", State: wire.Succeeded},
		{ID: "test", State: wire.Failed, ExitCode: &code, Message: &m},
		{ID: "lint", State: wire.Failed},
	}}
	a.printFailures(r, "client:alice")
	want := `
step test failed (exit 2), the last 8 lines of its message:
    step line 6
    step line 7
    step line 8
    step line 9
    step line 10
    step line 11
    step line 12
    error: \x1b[31mboom\x1b[0m
  the whole log: mediator logs a test --owner client:alice

step lint failed
  the whole log: mediator logs a lint --owner client:alice
`
	if b.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", b.String(), want)
	}
}

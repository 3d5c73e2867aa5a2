//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	locals3 "mediator/localdev/s3"
	"mediator/shared/client"
)

// These tests stream real steps' output to the local S3 through URLs presigned as the API
// presigns them. They wait on conditions (what S3 holds, a FIFO the step reads), never on the
// clock; patience only turns a hang into a failure.

const patience = 90 * time.Second

const bucket = "logs"

// bucketFor is a local S3 with the log bucket, and its clock, which a test may move on.
type testS3 struct {
	srv    *locals3.Server
	ahead  atomic.Int64 // how far the server's clock is ahead of time.Now, in ns
	signed atomic.Int64 // how long the URLs presigned from now on live, in ns
}

func startS3(t *testing.T) *testS3 {
	t.Helper()
	b := &testS3{}
	b.signed.Store(int64(15 * time.Minute))
	srv, err := locals3.Start(t.Context(), locals3.Options{
		Buckets: []string{bucket},
		Now:     func() time.Time { return time.Now().Add(time.Duration(b.ahead.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	b.srv = srv
	return b
}

// source is what the API's log-urls route gives for one try: presigned PUT URLs of
// <prefix>/<seq %08d> and <prefix>/live, with rules. It records each call's from.
type source struct {
	s3     *testS3
	prefix string
	rules  client.LogUpload
	mu     sync.Mutex
	froms  []int
}

func (s *source) batch(ctx context.Context, from, count int) (*client.LogUpload, error) {
	s.mu.Lock()
	s.froms = append(s.froms, from)
	s.mu.Unlock()
	life := time.Duration(s.s3.signed.Load())
	p := s.s3.srv.PresignClient()
	presign := func(key string) (string, error) {
		r, err := p.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}, s3.WithPresignExpires(life))
		if err != nil {
			return "", err
		}
		return r.URL, nil
	}
	b := s.rules
	b.Chunks = nil
	b.ExpiresAt = time.Now().Add(life)
	for seq := from; seq < from+count; seq++ {
		u, err := presign(fmt.Sprintf("%s/%08d", s.prefix, seq))
		if err != nil {
			return nil, err
		}
		b.Chunks = append(b.Chunks, client.ChunkURL{Seq: seq, URL: u})
	}
	var err error
	if b.Live, err = presign(s.prefix + "/live"); err != nil {
		return nil, err
	}
	return &b, nil
}

func (s *source) calls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.froms)
}

// stored is the try's log as a reader gets it: its chunks in order, which must run from 0
// without a gap.
func (s *source) stored(t *testing.T) []byte {
	t.Helper()
	var keys []string
	for _, o := range s.s3.srv.Objects(bucket) {
		if strings.HasPrefix(o.Key, s.prefix+"/") && !strings.HasSuffix(o.Key, "/live") {
			keys = append(keys, o.Key)
		}
	}
	slices.Sort(keys)
	var log []byte
	for i, k := range keys {
		if want := fmt.Sprintf("%s/%08d", s.prefix, i); k != want {
			t.Fatalf("chunk %d is %s: the chunks are not contiguous from 0 (%v)", i, k, keys)
		}
		body, _, _ := s.s3.srv.Object(bucket, k)
		if int64(len(body)) > s.rules.ChunkMaxBytes {
			t.Fatalf("chunk %s holds %d bytes, more than %d", k, len(body), s.rules.ChunkMaxBytes)
		}
		log = append(log, body...)
	}
	return log
}

func (s *source) chunks() int {
	n := 0
	for _, o := range s.s3.srv.Objects(bucket) {
		if strings.HasPrefix(o.Key, s.prefix+"/") && !strings.HasSuffix(o.Key, "/live") {
			n++
		}
	}
	return n
}

func (s *source) live() []byte {
	body, _, _ := s.s3.srv.Object(bucket, s.prefix+"/live")
	return body
}

func rules(chunkMax, maxBytes, tail int64, flush float64) client.LogUpload {
	return client.LogUpload{Try: 1, Epoch: 1, ChunkMaxBytes: chunkMax, MaxBytes: maxBytes, TailBytes: tail, FlushSeconds: flush}
}

// testStep is a real process writing to a step's output file, as the agent runs one.
type testStep struct {
	t           *testing.T
	out         *os.File
	begin, from int64
	cmd         *exec.Cmd
	gates       map[string]string
}

// startStep starts script under sh with its output in a fresh output file (its header
// written), and FIFOs $GATE1, $GATE2 it may wait on.
func startStep(t *testing.T, script string) *testStep {
	t.Helper()
	dir := t.TempDir()
	o := &outputs{dir: dir, keep: 10, busy: map[string]int{}}
	out, begin, from, err := o.open("r", "s", 1, "=== header of the try\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.done(out) })
	st := &testStep{t: t, out: out, begin: begin, from: from, gates: map[string]string{}}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ()
	for _, g := range []string{"GATE1", "GATE2"} {
		p := filepath.Join(dir, g)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		st.gates[g] = p
		cmd.Env = append(cmd.Env, g+"="+p)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st.cmd = cmd
	return st
}

// open lets the step past a gate.
func (s *testStep) open(gate string) {
	s.t.Helper()
	f, err := os.OpenFile(s.gates[gate], os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	fmt.Fprintln(f, "go")
	f.Close()
}

func (s *testStep) wait() {
	s.t.Helper()
	if err := s.cmd.Wait(); err != nil {
		s.t.Fatalf("the step: %v", err)
	}
}

// file is the step's whole local output file.
func (s *testStep) file() []byte {
	s.t.Helper()
	b, err := os.ReadFile(s.out.Name())
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func upload(t *testing.T, st *testStep, src *source, first int, o UploadOptions) (*Uploader, *AttemptLog) {
	t.Helper()
	batch, err := src.batch(context.Background(), 0, first)
	if err != nil {
		t.Fatal(err)
	}
	acc := NewAttemptLog()
	return StartUpload(st.out, st.begin, st.from, batch, src.batch, acc, o), acc
}

// eventually polls cond until it holds, failing after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func checkSummary(t *testing.T, acc *AttemptLog, want []byte, uploaded bool) {
	t.Helper()
	s := acc.Summary()
	if s.Bytes != int64(len(want)) || s.SHA256 != sha(want) || s.Uploaded != uploaded {
		t.Fatalf("summary %+v, want %d bytes, sha256 %s, uploaded %v", s, len(want), sha(want), uploaded)
	}
}

// A step printing a numbered line every half second: its log is readable while it runs, in
// order, and once it ended the stored log is its local output file, byte for byte.
func TestUploadStreamsNumberedLinesInOrder(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	src := &source{s3: b, prefix: "o/r/1/s/1/1", rules: rules(4<<20, 256<<20, 16<<20, 1)}
	st := startStep(t, `i=1; while [ $i -le 12 ]; do echo "line $i"; i=$((i+1)); sleep 0.5; done
read x < "$GATE1"; echo "the last line"`)
	up, acc := upload(t, st, src, 16, UploadOptions{})
	// Every line is in S3 while the step still runs (it waits on the gate).
	eventually(t, "line 12 stored while the step runs", func() bool { return bytes.Contains(src.stored(t), []byte("line 12\n")) })
	during := src.chunks()
	st.open("GATE1")
	st.wait()
	if why := up.Finish(); why != "" {
		t.Fatalf("incomplete: %s", why)
	}
	file, log := st.file(), src.stored(t)
	if !bytes.Equal(log, file) {
		t.Fatalf("the stored log is not the output file:\nstored %q\nfile   %q", log, file)
	}
	if !bytes.HasPrefix(file, []byte("=== header of the try\nline 1\nline 2\n")) || !bytes.HasSuffix(file, []byte("line 12\nthe last line\n")) {
		t.Fatalf("the output file %q", file)
	}
	if during < 2 {
		t.Fatalf("%d chunks while the step ran: its output was not streamed", during)
	}
	checkSummary(t, acc, file, true)
}

// 50 MiB of output: full chunks go as they fill, URLs are fetched again as batches run out,
// and the stored log is the file.
func TestUploadFiftyMebibytes(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	src := &source{s3: b, prefix: "o/r/1/big/1/1", rules: rules(4<<20, 256<<20, 16<<20, 2)}
	st := startStep(t, `seq 1 6700000`)
	up, acc := upload(t, st, src, 2, UploadOptions{Batch: 2})
	st.wait()
	if why := up.Finish(); why != "" {
		t.Fatalf("incomplete: %s", why)
	}
	file, log := st.file(), src.stored(t)
	if len(file) < 50<<20 {
		t.Fatalf("the step wrote only %d bytes", len(file))
	}
	if !bytes.Equal(log, file) {
		t.Fatalf("the stored log (%d bytes) is not the output file (%d bytes)", len(log), len(file))
	}
	// Numbered lines, so the file is what seq wrote: a chunk out of place would not be it.
	if n := bytes.Count(file, []byte("\n")); n != 6700001 || !bytes.HasSuffix(file, []byte("\n6699999\n6700000\n")) {
		t.Fatalf("the output file holds %d lines", n)
	}
	// Batches of two: each asked for where the URLs held end, before they run out.
	got := src.calls()
	for i := range got {
		if got[i] != 2*i {
			t.Fatalf("batches asked from %v", got)
		}
	}
	if len(got) < 7 {
		t.Fatalf("only %d batches for %d chunks", len(got), src.chunks())
	}
	checkSummary(t, acc, file, true)
}

// Past the cap the try keeps its head, then a marker saying what was left out, then its tail;
// while it runs, the live tail shows the newest output.
func TestUploadCapKeepsHeadMarkerTail(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	const chunkMax, maxBytes, tail = 64 << 10, 1 << 20, 256 << 10
	src := &source{s3: b, prefix: "o/r/1/cap/1/1", rules: rules(chunkMax, maxBytes, tail, 0.5)}
	st := startStep(t, `seq 1 500000; read x < "$GATE1"; echo "the very end"`)
	up, acc := upload(t, st, src, 16, UploadOptions{})
	eventually(t, "the live tail shows the newest output", func() bool { return bytes.HasSuffix(src.live(), []byte("\n500000\n")) })
	if n := len(src.live()); n > chunkMax {
		t.Fatalf("the live tail holds %d bytes", n)
	}
	if got := src.stored(t); len(got) != maxBytes {
		t.Fatalf("while past the cap, %d bytes of chunks, not the head of %d", len(got), maxBytes)
	}
	st.open("GATE1")
	st.wait()
	if why := up.Finish(); why != "" {
		t.Fatalf("incomplete: %s", why)
	}
	file := st.file()
	left := len(file) - maxBytes - tail
	var want []byte
	want = append(want, file[:maxBytes]...)
	want = fmt.Appendf(want, "\n=== mediator: %d bytes of output left out here (LOG_MAX_BYTES_PER_STEP); the last %d bytes follow ===\n", left, tail)
	want = append(want, file[len(file)-tail:]...)
	log := src.stored(t)
	if !bytes.Equal(log, want) {
		t.Fatalf("stored %d bytes, want %d: head %v, ends %q", len(log), len(want), bytes.Equal(log[:maxBytes], file[:maxBytes]), log[len(log)-40:])
	}
	if !bytes.HasSuffix(log, []byte("\n500000\nthe very end\n")) || !strings.Contains(string(log), " bytes of output left out here ") {
		t.Fatalf("the log's end %q", log[len(log)-100:])
	}
	checkSummary(t, acc, want, true)
}

// S3 gone mid-step: the uploader keeps trying, the step is not held up, the local copy stays
// whole, and the summary says the log is not all stored — its size and SHA-256 still the
// whole log's, the node's file.
func TestUploadSurvivesS3Gone(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	src := &source{s3: b, prefix: "o/r/1/gone/1/1", rules: rules(4<<20, 256<<20, 16<<20, 0.5)}
	st := startStep(t, `echo before; read x < "$GATE1"; echo during; read x < "$GATE2"; echo after`)
	up, acc := upload(t, st, src, 16, UploadOptions{FinalWait: time.Second})
	eventually(t, "the first output stored", func() bool { return bytes.Contains(src.stored(t), []byte("before\n")) })
	_ = b.srv.Close()
	st.open("GATE1")
	eventually(t, "the upload tried again", func() bool { return up.Stats.Failures.Load() >= 2 })
	st.open("GATE2")
	st.wait()
	why := up.Finish()
	if why == "" {
		t.Fatal("Finish says the log is all stored")
	}
	file := st.file()
	if string(file) != "=== header of the try\nbefore\nduring\nafter\n" {
		t.Fatalf("the local copy %q", file)
	}
	checkSummary(t, acc, file, false)
	note := IncompleteNote(why, st.out.Name())
	m := Message([]string{note}, []byte("after\n"), false)
	if !strings.HasPrefix(m, "log upload incomplete: ") || !strings.Contains(m, "; the full log is on the node at "+st.out.Name()+"\nafter") {
		t.Fatalf("the message %q", m)
	}
}

// A URL that died (the local S3 refuses an expired one, as S3 does) costs a fresh batch from
// the same chunk, not the log.
func TestUploadFetchesFreshURLsAfterA403(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	src := &source{s3: b, prefix: "o/r/1/exp/1/1", rules: rules(4<<20, 256<<20, 16<<20, 0.5)}
	st := startStep(t, `echo one; read x < "$GATE1"; echo two; echo three`)
	up, acc := upload(t, st, src, 16, UploadOptions{})
	eventually(t, "the first chunk stored", func() bool { return src.chunks() == 1 })
	// Every URL signed so far is now past its expiry to S3; the next ones live longer.
	b.signed.Store(int64(time.Hour))
	b.ahead.Store(int64(20 * time.Minute))
	st.open("GATE1")
	st.wait()
	if why := up.Finish(); why != "" {
		t.Fatalf("incomplete: %s", why)
	}
	if up.Stats.Forbidden.Load() < 1 || b.srv.Refused()["AccessDenied"] < 1 {
		t.Fatalf("no 403: %d, S3 refused %v", up.Stats.Forbidden.Load(), b.srv.Refused())
	}
	if got := src.calls(); len(got) < 2 || got[len(got)-1] != 1 {
		t.Fatalf("batches asked from %v: after the 403, a fresh one from chunk 1", got)
	}
	file := st.file()
	if log := src.stored(t); !bytes.Equal(log, file) {
		t.Fatalf("stored %q, file %q", log, file)
	}
	checkSummary(t, acc, file, true)
}

// Two tries of one attempt append to one file and add up to one log: the summary covers both.
func TestAttemptLogCoversItsTries(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	dir := t.TempDir()
	o := &outputs{dir: dir, keep: 10, busy: map[string]int{}}
	acc := NewAttemptLog()
	var stored []byte
	for try := 1; try <= 2; try++ {
		out, begin, from, err := o.open("r", "s", 1, "=== try "+strconv.Itoa(try)+"\n")
		if err != nil {
			t.Fatal(err)
		}
		src := &source{s3: b, prefix: "o/r/1/s/" + strconv.Itoa(try) + "/1", rules: rules(4<<20, 256<<20, 16<<20, 0.5)}
		src.rules.Try = try
		first, err := src.batch(context.Background(), 0, 16)
		if err != nil {
			t.Fatal(err)
		}
		up := StartUpload(out, begin, from, first, src.batch, acc, UploadOptions{})
		fmt.Fprintf(out, "output of try %d\n", try)
		if why := up.Finish(); why != "" {
			t.Fatal(why)
		}
		stored = append(stored, src.stored(t)...)
		o.done(out)
	}
	file, err := os.ReadFile(filepath.Join(dir, OutputFile("r", "s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, file) || string(file) != "=== try 1\noutput of try 1\n=== try 2\noutput of try 2\n" {
		t.Fatalf("stored %q, file %q", stored, file)
	}
	checkSummary(t, acc, file, true)
}

// The step's first output goes at once, not at the next flush (an hour away here); after it,
// output waits for the cadence or the step's end.
func TestUploadSendsTheFirstOutputAtOnce(t *testing.T) {
	t.Parallel()
	b := startS3(t)
	src := &source{s3: b, prefix: "o/r/1/first/1/1", rules: rules(4<<20, 256<<20, 16<<20, 3600)}
	st := startStep(t, `read x < "$GATE1"; echo "the first output"; read x < "$GATE2"; echo "the second"`)
	up, acc := upload(t, st, src, 16, UploadOptions{})
	st.open("GATE1")
	eventually(t, "the first output stored", func() bool { return bytes.Contains(src.stored(t), []byte("the first output\n")) })
	if n := src.chunks(); n != 1 {
		t.Fatalf("%d chunks: the header went alone", n)
	}
	st.open("GATE2")
	st.wait()
	if why := up.Finish(); why != "" {
		t.Fatal(why)
	}
	file := st.file()
	if log := src.stored(t); !bytes.Equal(log, file) || src.chunks() != 2 {
		t.Fatalf("stored %q in %d chunks, file %q", log, src.chunks(), file)
	}
	checkSummary(t, acc, file, true)
}

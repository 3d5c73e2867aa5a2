package httpapi_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/client"
	"mediator/shared/config"
	"mediator/shared/steplogs"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// started is a stack in which node A (boot a1) runs step s1 of a run of alice's, started:
// the started answer's upload URLs in hand.
type started struct {
	env   *apitest.Env
	run   string
	epoch int64
	up    client.LogUpload
}

// startStep submits run (alice's, needing board) and has A start its step s1.
func startStep(t *testing.T, run map[string]any, opts ...apitest.Option) started {
	t.Helper()
	env := apitest.New(t, opts...)
	env.Beat("A", "a1", false, "board")
	id := run["run_id"].(string)
	if r := env.Do(alice, "POST", "/v1/runs", run); r.Status != 201 {
		t.Fatalf("submit %s: %s", id, r)
	}
	s := started{env: env, run: id, epoch: env.Epoch("A")}
	s.up = s.start(t, "s1")
	return s
}

// start reports step as started by A and returns the answer's upload URLs (zero without).
func (s started) start(t *testing.T, step string) client.LogUpload {
	t.Helper()
	r := s.env.Report("A", "a1", s.epoch, s.run, step, wire.ReportStarted)
	if r.Status != 200 {
		t.Fatalf("A starts %s: %s", step, r)
	}
	var answer client.ReportReply
	r.Decode(t, &answer)
	if answer.Log == nil {
		return client.LogUpload{}
	}
	return *answer.Log
}

// finish reports step with status and the log summary given (none when nil).
func (s started) finish(t *testing.T, step, status string, log *client.LogSummary) apitest.Response {
	t.Helper()
	body := map[string]any{"node_id": "A", "boot_id": "a1", "epoch": s.epoch, "status": status}
	if status == wire.ReportFailed {
		body["exit_code"] = 1
	}
	if log != nil {
		body["log"] = log
	}
	return s.env.Do(apitest.Node("A"), "POST", "/v1/runs/"+s.run+"/steps/"+step+"/result", body)
}

// logURLs asks for URLs as node, for itself, with the lease given.
func (s started) logURLs(node, boot string, epoch int64, step string, from, count int) apitest.Response {
	return s.env.Do(apitest.Node(node), "POST", "/v1/runs/"+s.run+"/steps/"+step+"/log-urls",
		map[string]any{"node_id": node, "boot_id": boot, "epoch": epoch, "from": from, "count": count})
}

// summary is what a node reports of a log whose stored bytes are log.
func summary(log string, uploaded bool) *client.LogSummary {
	sum := sha256.Sum256([]byte(log))
	return &client.LogSummary{Bytes: int64(len(log)), SHA256: hex.EncodeToString(sum[:]), Uploaded: uploaded}
}

// upload PUTs body through a presigned URL as the agent does, with Content-MD5, and answers
// S3's status and error code.
func upload(t *testing.T, link string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, link, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(body)
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	return send(t, req)
}

var s3Code = regexp.MustCompile(`<Code>([^<]+)</Code>`)

func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := ""
	if m := s3Code.FindSubmatch(b); m != nil {
		code = string(m[1])
	}
	return resp.StatusCode, code
}

// mustUpload uploads body as chunk seq of the batch.
func mustUpload(t *testing.T, up client.LogUpload, seq int, body string) {
	t.Helper()
	for _, c := range up.Chunks {
		if c.Seq == seq {
			if status, code := upload(t, c.URL, []byte(body)); status != 200 {
				t.Fatalf("upload chunk %d: %d %s", seq, status, code)
			}
			return
		}
	}
	t.Fatalf("no URL for chunk %d in %d URLs from %d", seq, len(up.Chunks), up.Chunks[0].Seq)
}

// readLog is GET .../log as who, decoded.
func readLog(t *testing.T, env *apitest.Env, who auth.Principal, target string) client.StepLog {
	t.Helper()
	r := env.Do(who, "GET", target, nil)
	if r.Status != 200 {
		t.Fatalf("GET %s: %s", target, r)
	}
	var l client.StepLog
	r.Decode(t, &l)
	return l
}

// text is the log's chunks read through their URLs and joined, checking each offset and size.
func text(t *testing.T, l client.StepLog) string {
	t.Helper()
	var b strings.Builder
	for _, c := range l.Chunks {
		if c.Offset != int64(b.Len()) {
			t.Errorf("chunk %d/%d at offset %d, after %d bytes", c.Try, c.Seq, c.Offset, b.Len())
		}
		resp, err := http.Get(c.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || int64(len(body)) != c.Bytes {
			t.Fatalf("GET chunk %d/%d: %d, %d bytes of %d", c.Try, c.Seq, resp.StatusCode, len(body), c.Bytes)
		}
		b.Write(body)
	}
	return b.String()
}

// stepLogRows is the step's step_logs rows as "attempt state bytes sha256 uploaded".
func stepLogRows(t *testing.T, env *apitest.Env, run, step string) []string {
	t.Helper()
	rows, err := env.Store.Pool().Query(context.Background(),
		`SELECT attempt || ' ' || state || ' ' || bytes || ' ' || sha256 || ' ' || uploaded FROM step_logs WHERE run_id = $1 AND step_id = $2 ORDER BY attempt`, run, step)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// The started answer carries the try's first batch; more come from log-urls, for the node
// that runs the step under the lease it holds, and for no one else, and for nothing after the
// lease or the step is over.
func TestLogURLsAreFencedLikeReports(t *testing.T) {
	t.Parallel()
	t.Run("the first batch and the next", func(t *testing.T) {
		t.Parallel()
		s := startStep(t, oneNodeRun("r", "board"))
		up := s.up
		if up.Try != 1 || up.Epoch != s.epoch || len(up.Chunks) != wire.LogURLsFirstBatch || up.Chunks[0].Seq != 0 || up.Chunks[15].Seq != 15 ||
			up.ChunkMaxBytes != wire.LogChunkMaxBytes || up.MaxBytes != 256<<20 || up.TailBytes != 16<<20 || up.FlushSeconds != 2 || up.Live == "" {
			t.Fatalf("the started answer's batch: %+v", up)
		}
		if left := time.Until(up.ExpiresAt); left <= 14*time.Minute || left > 15*time.Minute {
			t.Errorf("the URLs expire in %s, want 15 minutes", left)
		}
		r := s.logURLs("A", "a1", s.epoch, "s1", 16, 64)
		var next client.LogUpload
		r.Decode(t, &next)
		if r.Status != 200 || len(next.Chunks) != 64 || next.Chunks[0].Seq != 16 || next.Chunks[63].Seq != 79 || next.Try != 1 {
			t.Fatalf("the next batch: %s", r)
		}
	})
	refused := func(t *testing.T, r apitest.Response) {
		t.Helper()
		if r.Status != 409 || !strings.Contains(string(r.Body), `"stale_assignment"`) {
			t.Fatalf("want 409 stale_assignment: %s", r)
		}
	}
	t.Run("another epoch, another boot, another node", func(t *testing.T) {
		t.Parallel()
		s := startStep(t, oneNodeRun("r", "board"))
		s.env.Beat("B", "b1", false, "lab")
		refused(t, s.logURLs("A", "a1", s.epoch+1, "s1", 0, 1))
		refused(t, s.logURLs("A", "a0", s.epoch, "s1", 0, 1))
		refused(t, s.logURLs("B", "b1", s.epoch, "s1", 0, 1))
	})
	t.Run("a step not started, a step finished", func(t *testing.T) {
		t.Parallel()
		s := startStep(t, oneNodeRun("r", "board", "s1", "s2"))
		refused(t, s.logURLs("A", "a1", s.epoch, "s2", 0, 1))
		if r := s.finish(t, "s1", wire.ReportSucceeded, nil); r.Status != 200 {
			t.Fatal(r)
		}
		refused(t, s.logURLs("A", "a1", s.epoch, "s1", 0, 1))
	})
	t.Run("after a cancel the node acknowledged", func(t *testing.T) {
		t.Parallel()
		s := startStep(t, oneNodeRun("r", "board"))
		if r := s.env.Do(alice, "POST", "/v1/runs/r/cancel", nil); r.Status != 202 {
			t.Fatal(r)
		}
		// While the cancel is under way the step runs on, and its last output is logged.
		if r := s.logURLs("A", "a1", s.epoch, "s1", 0, 1); r.Status != 200 {
			t.Fatalf("during the cancel: %s", r)
		}
		if r := s.finish(t, "s1", wire.ReportCancelled, nil); r.Status != 200 {
			t.Fatal(r)
		}
		refused(t, s.logURLs("A", "a1", s.epoch, "s1", 0, 1))
	})
	t.Run("after a forced cancel", func(t *testing.T) {
		t.Parallel()
		s := startStep(t, oneNodeRun("r", "board"))
		if r := s.env.Do(apitest.Admin, "POST", "/v1/runs/r/cancel", map[string]any{"force": true}); r.Status != 200 {
			t.Fatal(r)
		}
		refused(t, s.logURLs("A", "a1", s.epoch, "s1", 0, 1))
	})
	t.Run("after the node restarted", func(t *testing.T) {
		t.Parallel()
		run := oneNodeRun("r", "board")
		run["max_attempts"] = 2
		s := startStep(t, run)
		s.env.Beat("A", "a2", false, "board") // requeued, and placed on A again under a new epoch
		if fresh := s.env.Epoch("A"); fresh == s.epoch || fresh == 0 {
			t.Fatalf("not placed again: epoch %d", fresh)
		}
		refused(t, s.logURLs("A", "a1", s.epoch, "s1", 0, 1))
		// Not started yet in the new attempt: no URLs under the new lease either.
		refused(t, s.logURLs("A", "a2", s.env.Epoch("A"), "s1", 0, 1))
	})
}

// A stack without a bucket hands out no URLs, and its reader says the log is not stored.
func TestLogsNotStored(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("r", "board"), apitest.NoLogBucket())
	if s.up.Chunks != nil {
		t.Fatalf("the started answer carries URLs without a bucket: %+v", s.up)
	}
	r := s.logURLs("A", "a1", s.epoch, "s1", 0, 16)
	if r.Status != 404 || !strings.Contains(string(r.Body), `"logs_not_stored"`) {
		t.Fatalf("log-urls without a bucket: %s", r)
	}
	if r := s.finish(t, "s1", wire.ReportSucceeded, summary("x", false)); r.Status != 200 {
		t.Fatal(r)
	}
	l := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
	if l.Stored || l.Complete || len(l.Chunks) != 0 || l.Live != nil || l.State != wire.Succeeded || l.Attempt != 1 {
		t.Fatalf("the log without a bucket: %+v", l)
	}
}

// s3Clock is the local S3's clock, moved by the test.
type s3Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *s3Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.offset) }
func (c *s3Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// A URL writes the one key it was signed for, under the server's keys, with the body its
// Content-MD5 says, until it expires; S3 refuses anything else.
func TestUploadURLsWriteTheirKeyOnly(t *testing.T) {
	t.Parallel()
	clock := &s3Clock{}
	s := startStep(t, oneNodeRun("r", "board"), apitest.S3Clock(clock.Now))
	target := store.LogTarget{Owner: "client:alice", RunKey: "r", Attempt: 1, StepID: "s1", Try: 1, Epoch: s.epoch}
	mustUpload(t, s.up, 0, "line 1\n")
	body, _, ok := s.env.S3.Object(apitest.LogBucket, steplogs.ChunkKey(target, 0))
	if !ok || string(body) != "line 1\n" {
		t.Fatalf("chunk 0 at %s: %q %v; the bucket holds %v", steplogs.ChunkKey(target, 0), body, ok, s.env.S3.Objects(apitest.LogBucket))
	}
	if want := fmt.Sprintf("client:alice/r/1/s1/1/%d/00000000", s.epoch); steplogs.ChunkKey(target, 0) != want {
		t.Errorf("chunk key %s, want %s", steplogs.ChunkKey(target, 0), want)
	}

	// Chunk 1's URL bent to chunk 2's key, or another run's.
	for _, key := range []string{steplogs.ChunkKey(target, 2), "client:bob/other/1/s1/1/1/00000000"} {
		u, _ := url.Parse(s.up.Chunks[1].URL)
		u.Path = "/" + apitest.LogBucket + "/" + key
		req, _ := http.NewRequest(http.MethodPut, u.String(), strings.NewReader("forged"))
		if status, code := send(t, req); status != 403 || code != "SignatureDoesNotMatch" {
			t.Errorf("chunk 1's URL for %s: %d %s", key, status, code)
		}
	}
	// A body that is not the one its Content-MD5 names.
	req, _ := http.NewRequest(http.MethodPut, s.up.Chunks[1].URL, strings.NewReader("altered on the way"))
	sum := md5.Sum([]byte("sent"))
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	if status, code := send(t, req); status != 400 || code != "BadDigest" {
		t.Errorf("a body its Content-MD5 does not match: %d %s", status, code)
	}
	if n := len(s.env.S3.Objects(apitest.LogBucket)); n != 1 {
		t.Errorf("%d objects after the refusals, want chunk 0 alone", n)
	}

	// Good through its last second, refused after.
	clock.Advance(time.Until(s.up.ExpiresAt) - time.Second)
	mustUpload(t, s.up, 1, "line 2\n")
	clock.Advance(2 * time.Second)
	if status, code := upload(t, s.up.Chunks[2].URL, []byte("late")); status != 403 || code != "AccessDenied" {
		t.Errorf("after its expiry: %d %s", status, code)
	}
}

// What a node uploaded under an attempt that is over — before the run was requeued, and after,
// with the URLs it still held — is that attempt's log, never the new attempt's.
func TestAnOldAttemptsChunksAreNotTheNewAttemptsLog(t *testing.T) {
	t.Parallel()
	run := oneNodeRun("r", "board")
	run["max_attempts"] = 2
	s := startStep(t, run)
	old := s.up
	mustUpload(t, old, 0, "attempt 1\n")
	s.env.Beat("A", "a2", false, "board") // A restarted: r is requeued and placed on A again
	// The old agent, still holding URLs that have not expired, writes on.
	mustUpload(t, old, 1, "written after the restart\n")

	s2 := started{env: s.env, run: "r", epoch: s.env.Epoch("A")}
	r := s.env.Report("A", "a2", s2.epoch, "r", "s1", wire.ReportStarted)
	var answer client.ReportReply
	r.Decode(t, &answer)
	if r.Status != 200 || answer.Log == nil || answer.Log.Epoch != s2.epoch || answer.Log.Try != 1 {
		t.Fatalf("the new attempt's start: %s", r)
	}
	mustUpload(t, *answer.Log, 0, "attempt 2\n")

	now := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
	if now.Attempt != 2 || now.State != wire.Running || text(t, now) != "attempt 2\n" {
		t.Fatalf("the current attempt's log: %+v", now)
	}
	before := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log?attempt=1")
	if before.Attempt != 1 || before.State != wire.Cancelled || before.Complete || text(t, before) != "attempt 1\nwritten after the restart\n" {
		t.Fatalf("the first attempt's log: %+v", before)
	}
}

// The run's owner reads the log, and an admin does; to another client the run does not exist,
// byte for byte the answer GET /v1/runs/{run_id} gives it.
func TestStepLogIsTheOwnersAndAdmins(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("r", "board"))
	mustUpload(t, s.up, 0, "hello\n")
	for _, who := range []struct {
		p      auth.Principal
		target string
	}{{alice, "/v1/runs/r/steps/s1/log"}, {apitest.Admin, "/v1/runs/r/steps/s1/log"}, {apitest.Admin, "/v1/runs/r/steps/s1/log?owner=client:alice"}} {
		if l := readLog(t, s.env, who.p, who.target); text(t, l) != "hello\n" || l.RunID != "r" || l.StepID != "s1" {
			t.Errorf("%s reads %s: %+v", who.p.Owner(), who.target, l)
		}
	}
	bob := apitest.Client("bob")
	stranger := s.env.Do(bob, "GET", "/v1/runs/r/steps/s1/log", nil)
	missing := s.env.Do(bob, "GET", "/v1/runs/r", nil)
	unRequested := func(b []byte) string {
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		delete(m, "request_id")
		out, _ := json.Marshal(m)
		return string(out)
	}
	if stranger.Status != 404 || unRequested(stranger.Body) != unRequested(missing.Body) {
		t.Errorf("bob reads alice's log: %s; GET /v1/runs/r answers him %s", stranger, missing)
	}
}

// A log is shown as far as its chunks run in order, and complete only when everything the rules
// ask is so: the step final, its node's word that every chunk went up, no gap, no chunk too
// large, and the size the node gave.
func TestStepLogCompleteness(t *testing.T) {
	t.Parallel()
	const log = "one\ntwo\nthree\n"
	cases := []struct {
		name     string
		chunks   []string // by seq; "" leaves a gap
		final    *client.LogSummary
		shown    string
		complete bool
	}{
		{name: "running", chunks: []string{"one\n", "two\n"}, shown: "one\ntwo\n"},
		{name: "final and all in", chunks: []string{"one\n", "two\n", "three\n"}, final: summary(log, true), shown: log, complete: true},
		{name: "the node could not upload it all", chunks: []string{"one\n", "two\n", "three\n"}, final: summary(log, false), shown: log},
		{name: "a size the chunks do not add up to", chunks: []string{"one\n", "two\n"}, final: summary(log, true), shown: "one\ntwo\n"},
		{name: "a gap", chunks: []string{"one\n", "", "three\n"}, final: summary("one\nthree\n", true), shown: "one\n"},
		{name: "a chunk larger than a chunk may be", chunks: []string{"one\n", strings.Repeat("x", wire.LogChunkMaxBytes+1), "three\n"},
			final: summary("one\n"+strings.Repeat("x", wire.LogChunkMaxBytes+1)+"three\n", true), shown: "one\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startStep(t, oneNodeRun("r", "board"))
			for seq, body := range c.chunks {
				if body != "" {
					mustUpload(t, s.up, seq, body)
				}
			}
			if c.final != nil {
				if r := s.finish(t, "s1", wire.ReportSucceeded, c.final); r.Status != 200 {
					t.Fatal(r)
				}
			}
			l := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
			if got := text(t, l); got != c.shown || l.Complete != c.complete || !l.Stored {
				t.Fatalf("shows %q, complete %v; want %q, %v (%+v)", got, l.Complete, c.shown, c.complete, l)
			}
			switch {
			case c.complete && (l.Bytes == nil || *l.Bytes != c.final.Bytes || l.SHA256 == nil || *l.SHA256 != c.final.SHA256):
				t.Errorf("complete without the node's size and digest: %v %v", l.Bytes, l.SHA256)
			case !c.complete && (l.Bytes != nil || l.SHA256 != nil):
				t.Errorf("incomplete, yet a size and digest to check against: %v %v", *l.Bytes, *l.SHA256)
			}
			if left := time.Until(l.ExpiresAt); left <= 4*time.Minute || left > 5*time.Minute {
				t.Errorf("the GET URLs expire in %s, want 5 minutes", left)
			}
		})
	}
}

// A retried step's log is its tries' logs in try order; a capped try's live tail is shown
// while the try runs and not after; an object under the step's prefix with another epoch is no
// part of it.
func TestStepLogOfTriesAndTheLiveTail(t *testing.T) {
	t.Parallel()
	run := oneNodeRun("r", "board")
	run["steps"] = []map[string]any{{"id": "s1", "retries": 1}}
	s := startStep(t, run)
	mustUpload(t, s.up, 0, "try 1\n")
	if r := s.finish(t, "s1", wire.ReportFailed, summary("try 1\n", true)); r.Status != 200 || !strings.Contains(string(r.Body), `"step_state":"PENDING"`) {
		t.Fatalf("the first try fails, with a retry left: %s", r)
	}
	second := s.start(t, "s1")
	if second.Try != 2 || second.Epoch != s.epoch {
		t.Fatalf("the second try's URLs: try %d epoch %d", second.Try, second.Epoch)
	}
	mustUpload(t, second, 0, "try 2\n")
	if status, code := upload(t, second.Live, []byte("the newest output")); status != 200 {
		t.Fatalf("the live tail: %d %s", status, code)
	}
	// Not the server's to have signed: the same step and try, another epoch.
	stray := store.LogTarget{Owner: "client:alice", RunKey: "r", Attempt: 1, StepID: "s1", Try: 2, Epoch: s.epoch + 7}
	if _, err := s3Client(s.env).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(apitest.LogBucket), Key: aws.String(steplogs.ChunkKey(stray, 1)), Body: strings.NewReader("stray\n"),
	}); err != nil {
		t.Fatal(err)
	}

	l := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
	if got := text(t, l); got != "try 1\ntry 2\n" || l.Complete || l.Chunks[0].Try != 1 || l.Chunks[1].Try != 2 {
		t.Fatalf("while the second try runs: %q %+v", got, l)
	}
	if l.Live == nil || l.Live.Try != 2 || l.Live.Bytes != int64(len("the newest output")) {
		t.Fatalf("no live tail while the try runs: %+v", l.Live)
	}
	if resp, err := http.Get(l.Live.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("reading the live tail: %v %v", resp, err)
	}
	if r := s.finish(t, "s1", wire.ReportSucceeded, summary("try 1\ntry 2\n", true)); r.Status != 200 {
		t.Fatal(r)
	}
	l = readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
	if got := text(t, l); got != "try 1\ntry 2\n" || !l.Complete || l.Live != nil || l.State != wire.Succeeded {
		t.Fatalf("after the second try: %q %+v", got, l)
	}
	if rows := stepLogRows(t, s.env, "r", "s1"); len(rows) != 1 || !strings.HasPrefix(rows[0], "1 SUCCEEDED 12 ") {
		t.Errorf("step_logs after the retry: %v", rows)
	}
}

// s3Client is the SDK's client of the test's local S3, for what no node could do.
func s3Client(env *apitest.Env) *s3.Client { return env.S3.Client() }

// The terminal report's summary is stored with the report, in its transaction: a repeat
// changes nothing, and a report refused stores none.
func TestTerminalReportStoresTheLogSummary(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("r", "board", "s1", "s2"))
	want := summary("all of it\n", true)
	// Refused: another epoch.
	body := map[string]any{"node_id": "A", "boot_id": "a1", "epoch": s.epoch + 1, "status": "succeeded", "log": want}
	if r := s.env.Do(apitest.Node("A"), "POST", "/v1/runs/r/steps/s1/result", body); r.Status != 409 {
		t.Fatalf("a stale report: %s", r)
	}
	if rows := stepLogRows(t, s.env, "r", "s1"); rows != nil {
		t.Fatalf("a refused report stored %v", rows)
	}
	if r := s.finish(t, "s1", wire.ReportSucceeded, want); r.Status != 200 {
		t.Fatal(r)
	}
	row := fmt.Sprintf("1 SUCCEEDED %d %s true", want.Bytes, want.SHA256)
	if rows := stepLogRows(t, s.env, "r", "s1"); len(rows) != 1 || rows[0] != row {
		t.Fatalf("stored %v, want [%s]", rows, row)
	}
	var recorded time.Time
	read := func() time.Time {
		var at time.Time
		if err := s.env.Store.Pool().QueryRow(context.Background(), `SELECT recorded_at FROM step_logs WHERE run_id = 'r'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	recorded = read()
	// The same report again (its answer lost): 200, and nothing written.
	if r := s.finish(t, "s1", wire.ReportSucceeded, want); r.Status != 200 {
		t.Fatal(r)
	}
	if rows := stepLogRows(t, s.env, "r", "s1"); len(rows) != 1 || rows[0] != row || !read().Equal(recorded) {
		t.Fatalf("a repeated report rewrote the summary: %v", rows)
	}
	// A report without a summary stores none.
	s.start(t, "s2")
	if r := s.finish(t, "s2", wire.ReportSucceeded, nil); r.Status != 200 {
		t.Fatal(r)
	}
	if rows := stepLogRows(t, s.env, "r", "s2"); rows != nil {
		t.Fatalf("a report without a log stored %v", rows)
	}
}

// The reaper removes a pruned run's logs with it, and only its: a run past retention loses its
// objects and its rows, a recent one keeps both, and a run that never ran costs no request.
func TestRetentionRemovesTheLogsOfPrunedRuns(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("old", "board"), apitest.Configure(func(c *config.Config) { c.RetentionDays = 30 }))
	mustUpload(t, s.up, 0, "old\n")
	if r := s.finish(t, "s1", wire.ReportSucceeded, summary("old\n", true)); r.Status != 200 {
		t.Fatal(r)
	}
	recent := started{env: s.env, run: "recent", epoch: 0}
	if r := s.env.Do(alice, "POST", "/v1/runs", oneNodeRun("recent", "board")); r.Status != 201 {
		t.Fatal(r)
	}
	recent.epoch = s.env.Epoch("A")
	mustUpload(t, recent.start(t, "s1"), 0, "recent\n")
	if r := recent.finish(t, "s1", wire.ReportSucceeded, summary("recent\n", true)); r.Status != 200 {
		t.Fatal(r)
	}
	if r := s.env.Do(alice, "POST", "/v1/runs", oneNodeRun("never-ran", "gpu")); r.Status != 422 {
		t.Fatal(r)
	}
	s.env.Exec(`UPDATE runs SET finished_at = now() - interval '40 days' WHERE run_id IN ('old', 'never-ran')`)
	lists := s.env.S3.Requests()["ListObjectsV2"]

	if sum := s.env.Reap(); sum.Pruned != 2 {
		t.Fatalf("pruned %d runs, want old and never-ran", sum.Pruned)
	}
	var keys []string
	for _, o := range s.env.S3.Objects(apitest.LogBucket) {
		keys = append(keys, o.Key)
	}
	if len(keys) != 1 || !strings.HasPrefix(keys[0], steplogs.RunPrefix("client:alice", "recent")) {
		t.Fatalf("left in the bucket: %v", keys)
	}
	if n := s.env.S3.Requests()["ListObjectsV2"] - lists; n != 1 {
		t.Errorf("%d listings for two pruned runs, one of which never ran", n)
	}
	if n := s.env.Count(`SELECT count(*) FROM step_logs WHERE run_id = 'old'`); n != 0 {
		t.Errorf("%d step_logs rows of a pruned run", n)
	}
	if l := readLog(t, s.env, alice, "/v1/runs/recent/steps/s1/log"); !l.Complete || text(t, l) != "recent\n" {
		t.Errorf("the recent run's log: %+v", l)
	}
}

// S3 unreachable does not hold retention back: the run is pruned all the same (the bucket's
// lifecycle rule expires what is left).
func TestRetentionPrunesWhenTheBucketFails(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("old", "board"), apitest.Configure(func(c *config.Config) { c.RetentionDays = 30 }))
	mustUpload(t, s.up, 0, "old\n")
	if r := s.finish(t, "s1", wire.ReportSucceeded, summary("old\n", true)); r.Status != 200 {
		t.Fatal(r)
	}
	s.env.Exec(`UPDATE runs SET finished_at = now() - interval '40 days' WHERE run_id = 'old'`)
	if err := s.env.S3.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := s.env.Store.Reap(ctx, store.ReapParams{RemoveLogs: s.env.Deps.Logs.RemoveRun})
	if err != nil || sum.Pruned != 1 {
		t.Fatalf("reap with the bucket down: pruned %d, %v", sum.Pruned, err)
	}
	if n := s.env.Count(`SELECT count(*) FROM runs WHERE run_id = 'old'`); n != 0 {
		t.Fatalf("the run is still there")
	}
}

// Every name a key is built from is one segment of it: an owner with a "/" of its own (an IAM
// caller's role path, a CI job) cannot reach into another owner's logs.
func TestLogKeysEscapeTheirNames(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	ci := apitest.Client("ci/job+1")
	env.Beat("A", "a1", false, "board")
	if r := env.Do(ci, "POST", "/v1/runs", oneNodeRun("r", "board")); r.Status != 201 {
		t.Fatal(r)
	}
	s := started{env: env, run: "r", epoch: env.Epoch("A")}
	mustUpload(t, s.start(t, "s1"), 0, "from ci\n")
	want := fmt.Sprintf("client:ci%%2Fjob+1/r/1/s1/1/%d/00000000", s.epoch)
	if _, _, ok := env.S3.Object(apitest.LogBucket, want); !ok {
		t.Fatalf("no chunk at %s: %v", want, env.S3.Objects(apitest.LogBucket))
	}
	if l := readLog(t, env, ci, "/v1/runs/r/steps/s1/log"); text(t, l) != "from ci\n" {
		t.Fatalf("ci's log: %+v", l)
	}
}

// A run's logs go while its rows are still there, and its key still taken: once the rows are
// gone nothing names the objects, and a new run may take the key and its prefix.
func TestRetentionRemovesLogsBeforeTheirRun(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("old", "board"), apitest.Configure(func(c *config.Config) { c.RetentionDays = 30 }))
	if r := s.finish(t, "s1", wire.ReportSucceeded, nil); r.Status != 200 {
		t.Fatal(r)
	}
	s.env.Exec(`UPDATE runs SET finished_at = now() - interval '40 days' WHERE run_id = 'old'`)
	var removed []store.PrunedRun
	sum, err := s.env.Store.Reap(context.Background(), store.ReapParams{RemoveLogs: func(ctx context.Context, r store.PrunedRun) error {
		if n := s.env.Count(`SELECT count(*) FROM runs WHERE run_id = $1`, r.Key); n != 1 {
			t.Errorf("the logs of %s removed after its row went", r.Key)
		}
		removed = append(removed, r)
		return fmt.Errorf("S3 said no")
	}})
	if err != nil || sum.Pruned != 1 || len(removed) != 1 || removed[0] != (store.PrunedRun{Owner: "client:alice", Key: "old"}) {
		t.Fatalf("pruned %d, removed %v, %v", sum.Pruned, removed, err)
	}
}

// A log of more chunks than one answer lists is read in pages: each answer lists at most
// steplogs.MaxChunksRead chunks from the offset asked for, says more follow, and the pages
// joined are the whole log, complete, with the size and digest the node reported; a bad
// offset is a 400 naming it.
func TestStepLogIsReadInPages(t *testing.T) {
	t.Parallel()
	s := startStep(t, oneNodeRun("r", "board"))
	target := store.LogTarget{Owner: "client:alice", RunKey: "r", Attempt: 1, StepID: "s1", Try: 1, Epoch: s.epoch}
	var log strings.Builder
	for seq := range steplogs.MaxChunksRead + 3 {
		chunk := fmt.Sprintf("line %d\n", seq)
		log.WriteString(chunk)
		if _, err := s3Client(s.env).PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(apitest.LogBucket), Key: aws.String(steplogs.ChunkKey(target, seq)), Body: strings.NewReader(chunk),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.finish(t, "s1", wire.ReportSucceeded, summary(log.String(), true)); r.Status != 200 {
		t.Fatal(r)
	}
	first := readLog(t, s.env, alice, "/v1/runs/r/steps/s1/log")
	if len(first.Chunks) != steplogs.MaxChunksRead || !first.More || !first.Complete {
		t.Fatalf("the first page: %d chunks, more %t, complete %t", len(first.Chunks), first.More, first.Complete)
	}
	head := text(t, first)
	from := first.Chunks[len(first.Chunks)-1].Offset + first.Chunks[len(first.Chunks)-1].Bytes
	rest := readLog(t, s.env, alice, fmt.Sprintf("/v1/runs/r/steps/s1/log?from=%d", from))
	if len(rest.Chunks) != 3 || rest.More || rest.Chunks[0].Offset != from || rest.Chunks[0].Seq != steplogs.MaxChunksRead {
		t.Fatalf("the second page: %+v", rest)
	}
	var tail strings.Builder
	for _, c := range rest.Chunks {
		resp, err := http.Get(c.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tail.Write(b)
	}
	if head+tail.String() != log.String() || rest.SHA256 == nil || *rest.SHA256 != summary(log.String(), true).SHA256 {
		t.Fatalf("the pages joined are not the log")
	}
	for _, bad := range []string{"-1", "x", "01", "1e3"} {
		r := s.env.Do(alice, "GET", "/v1/runs/r/steps/s1/log?from="+bad, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), `"from"`) {
			t.Errorf("from=%s: %s", bad, r)
		}
	}
}

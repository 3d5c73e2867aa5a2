//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mediator/shared/client"
)

// URLSource gives upload URLs for one try of a step, from chunk number from on: in the agent,
// the API's log-urls route, fenced by the lease like a report; in tests, a presigner.
type URLSource func(ctx context.Context, from, count int) (*client.LogUpload, error)

// codeLogsNotStored is the log-urls route's 404 in a stack that keeps no logs.
const codeLogsNotStored = "logs_not_stored"

// Upload defaults; UploadOptions' zero values take them.
const (
	// defaultPoll is how often the output file's size is looked at: the first output goes
	// within about a second, and a full chunk about as soon as it is written.
	defaultPoll = 200 * time.Millisecond
	// defaultFinalWait bounds how long a step's report waits for its log's last flush: the
	// report, and with it the run, must not wait on S3.
	defaultFinalWait = 30 * time.Second
	// defaultBatch is how many URLs are asked for at once (the route's most): a busy step
	// costs one call per 64 chunks, about one every two minutes at the default cadence.
	defaultBatch = 64
	// The rules a batch should carry, used when it carries none: S3's 4 MiB chunk of the
	// contract, and the default cadence.
	defaultChunkMax = 4 << 20
	defaultFlush    = 2 * time.Second
	// lowWater: fewer URLs left than this, more are fetched before they run out.
	lowWater = 4
	// expiryMargin: URLs this close to their expiry are replaced rather than used, so a PUT
	// does not start on a URL that dies on the way.
	expiryMargin = time.Minute
	// putTimeout bounds one PUT of a chunk (4 MiB at 40 KB/s).
	putTimeout = 2 * time.Minute
	// retryCeiling bounds the backoff between tries of a chunk: an S3 that comes back is used
	// again within it.
	retryCeiling = 15 * time.Second
)

// UploadOptions tune an upload; the zero value is the agent's.
type UploadOptions struct {
	Poll      time.Duration
	FinalWait time.Duration
	Batch     int
	HTTP      *http.Client
	Log       *slog.Logger
}

// AttemptLog is the log of one attempt of a step as its tries stored it, in order: a terminal
// report's summary covers every try of the attempt, since the server keeps one log per attempt
// whose tries follow one another. Its tries run one after another, never at once.
type AttemptLog struct {
	h        hash.Hash
	bytes    int64
	uploaded bool
}

// NewAttemptLog is an attempt's log before its first try.
func NewAttemptLog() *AttemptLog { return &AttemptLog{h: sha256.New(), uploaded: true} }

func (l *AttemptLog) add(b []byte) {
	l.h.Write(b)
	l.bytes += int64(len(b))
}

// Summary is what the terminal report says of the log.
func (l *AttemptLog) Summary() *client.LogSummary {
	return &client.LogSummary{Bytes: l.bytes, SHA256: hex.EncodeToString(l.h.Sum(nil)), Uploaded: l.uploaded}
}

// UploadStats count what an upload did, for its log line and for tests.
type UploadStats struct {
	Puts      atomic.Int64 // PUTs that S3 took (chunks and the live tail)
	Failures  atomic.Int64 // PUTs that failed, 403s included
	Forbidden atomic.Int64 // 403s: URLs that died
	Batches   atomic.Int64 // batches of URLs fetched from the source
}

// Uploader streams one try's output to S3 while the step runs: the bytes of the output file
// from the offset where the try began, as numbered chunks through presigned PUT URLs, each
// with its Content-MD5. It reads the file through the descriptor the step writes to, never by
// name. It runs in a goroutine of its own: nothing it does, or fails to do, blocks the step
// or changes how it ends.
//
// Cadence: the step's first output goes at once (within Poll; the agent's header line alone
// waits for it, or for FlushSeconds), then whatever is new every FlushSeconds (nothing new: no
// PUT); a full chunk goes at once; the step's end flushes at
// once. Past MaxBytes of the try no more numbered chunks go while it runs: each flush rewrites
// the live tail (the newest ChunkMaxBytes), and at the end a marker chunk says how much was
// left out, followed by the try's last TailBytes as chunks. A failed PUT is tried again, with
// a jittered backoff of at most retryCeiling, from the same chunk: chunks go strictly in
// order, so the stored log never has a hole a reader would stop at.
type Uploader struct {
	f     *os.File
	start int64
	src   URLSource
	o     UploadOptions
	log   *slog.Logger
	acc   *AttemptLog
	Stats UploadStats

	try                       int
	chunkMax, maxBytes, tailB int64
	flush                     time.Duration

	urls    map[int]string
	live    string
	expires time.Time

	seq       int   // the next chunk's number
	head      int64 // bytes of the try put as numbered chunks so far, from start
	output    int64 // where the step's own output begins in the try, past the agent's header
	lastFlush time.Time
	liveAt    int64 // the try's size when the live tail was last written
	lastLive  time.Time
	retryAt   time.Time
	failures  int   // consecutive
	gaveUp    error // uploading stopped for good, and why
	lastErr   error
	complete  bool // every byte of the try's log was put

	ctx     context.Context
	cancel  context.CancelFunc
	ended   chan struct{}
	done    chan struct{}
	aborted atomic.Bool
	once    sync.Once
}

// StartUpload begins uploading the try whose log f holds from offset start (its header), its
// output from offset from, with the first batch of URLs, into acc. The caller ends it with
// Finish, or Abort.
func StartUpload(f *os.File, start, from int64, first *client.LogUpload, src URLSource, acc *AttemptLog, o UploadOptions) *Uploader {
	if o.Poll <= 0 {
		o.Poll = defaultPoll
	}
	if o.FinalWait <= 0 {
		o.FinalWait = defaultFinalWait
	}
	if o.Batch <= 0 || o.Batch > defaultBatch {
		o.Batch = defaultBatch
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	u := &Uploader{
		f: f, start: start, output: max(from-start, 0), lastFlush: time.Now(), src: src, o: o, log: o.Log, acc: acc, try: first.Try,
		chunkMax: first.ChunkMaxBytes, maxBytes: first.MaxBytes, tailB: first.TailBytes,
		flush: time.Duration(first.FlushSeconds * float64(time.Second)),
		urls:  map[int]string{}, ended: make(chan struct{}), done: make(chan struct{}),
	}
	if u.chunkMax <= 0 {
		u.chunkMax = defaultChunkMax
	}
	if u.flush <= 0 {
		u.flush = defaultFlush
	}
	u.tailB = max(u.tailB, 0)
	u.take(first, false)
	u.ctx, u.cancel = context.WithCancel(context.Background())
	go u.run()
	return u
}

// Finish tells the upload the step ended, waits for the last flush at most FinalWait, and
// says why the log is not all stored ("" when it is). The attempt's log then covers the try:
// every byte it meant to store is counted in its size and SHA-256, stored or not.
func (u *Uploader) Finish() string { return u.FinishWithin(u.o.FinalWait) }

// FinishWithin is Finish waiting at most wait: a stopping agent has less time than a step.
func (u *Uploader) FinishWithin(wait time.Duration) string {
	u.once.Do(func() {
		t := time.AfterFunc(wait, u.cancel)
		defer t.Stop()
		close(u.ended)
		<-u.done
	})
	if u.complete {
		return ""
	}
	switch {
	case u.gaveUp != nil:
		return u.gaveUp.Error()
	case u.lastErr != nil && u.ctx.Err() != nil:
		return fmt.Sprintf("still failing when the step's end had waited for it: %v", u.lastErr)
	case u.lastErr != nil:
		return u.lastErr.Error()
	}
	return "the last flush did not finish in the time the step's end waits for it"
}

// Abort stops the upload at once, flushing nothing more: the lease is gone, and what would be
// uploaded under it is nobody's log.
func (u *Uploader) Abort() {
	u.once.Do(func() {
		u.aborted.Store(true)
		u.cancel()
		close(u.ended)
		<-u.done
	})
}

// capped: the try passes MaxBytes once it has n bytes.
func (u *Uploader) capped(n int64) bool { return u.maxBytes > 0 && n > u.maxBytes }

func (u *Uploader) run() {
	defer close(u.done)
	t := time.NewTicker(u.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-u.ended:
			if !u.aborted.Load() {
				u.final()
			}
			u.acc.uploaded = u.acc.uploaded && u.complete
			u.log.Info("step log uploaded", "try", u.try, "chunks", u.seq, "bytes", u.acc.bytes, "complete", u.complete,
				"puts", u.Stats.Puts.Load(), "failures", u.Stats.Failures.Load())
			return
		default:
		}
		u.tick()
		select {
		case <-u.ended:
		case <-t.C:
		}
	}
}

// size is the try's output so far.
func (u *Uploader) size() (int64, error) {
	fi, err := u.f.Stat()
	if err != nil {
		return 0, err
	}
	return max(fi.Size()-u.start, 0), nil
}

// tick uploads what the cadence says is due while the step runs.
func (u *Uploader) tick() {
	now := time.Now()
	if u.gaveUp != nil || now.Before(u.retryAt) {
		return
	}
	n, err := u.size()
	if err != nil {
		u.stop(fmt.Errorf("reading the output file: %w", err))
		return
	}
	headEnd := n
	if u.capped(n) {
		headEnd = u.maxBytes
	}
	for u.head < headEnd {
		pending := headEnd - u.head
		// The step's first output goes at once: a step that fails at once is read at once.
		first := u.head <= u.output && headEnd > u.output
		if pending < u.chunkMax && !first && now.Sub(u.lastFlush) < u.flush {
			break
		}
		data, err := u.read(u.head, min(pending, u.chunkMax))
		if err != nil {
			u.stop(fmt.Errorf("reading the output file: %w", err))
			return
		}
		if !u.putChunk(data) {
			return
		}
		now = time.Now()
	}
	if u.capped(n) && u.head >= headEnd && n > u.liveAt && now.Sub(u.lastLive) >= u.flush {
		from := max(u.maxBytes, n-u.chunkMax)
		data, err := u.read(from, n-from)
		if err != nil {
			u.stop(fmt.Errorf("reading the output file: %w", err))
			return
		}
		if u.putLive(data) {
			u.liveAt, u.lastLive = from+int64(len(data)), time.Now()
		}
	}
}

// final stores the rest of the try's log once the step ended: the rest of the head, and, past
// the cap, the marker and the tail. Every piece is counted in the attempt's log, in order, even
// once uploading gave up: the summary is of the log as it should be stored, which is the local
// file's bytes unless the cap left some out.
func (u *Uploader) final() {
	u.retryAt = time.Time{} // the end flushes at once, whatever the backoff said
	n, err := u.size()
	if err != nil {
		u.stop(fmt.Errorf("reading the output file: %w", err))
		return
	}
	headEnd, tailFrom := n, n
	if u.capped(n) && n-u.tailB > u.maxBytes {
		headEnd, tailFrom = u.maxBytes, n-u.tailB
	}
	uploading := u.gaveUp == nil
	store := func(data []byte) {
		if uploading && !u.putRetrying(data) {
			uploading = false
		}
		if !uploading {
			u.acc.add(data) // put ones were counted by putChunk
			u.head += int64(len(data))
		}
	}
	piece := func(from, to int64) bool {
		for off := from; off < to; {
			data, err := u.read(off, min(to-off, u.chunkMax))
			if err != nil {
				u.stop(fmt.Errorf("reading the output file: %w", err))
				return false
			}
			store(data)
			off += int64(len(data))
		}
		return true
	}
	if !piece(u.head, headEnd) {
		return
	}
	if tailFrom > headEnd {
		marker := fmt.Sprintf("\n=== mediator: %d bytes of output left out here (LOG_MAX_BYTES_PER_STEP); the last %d bytes follow ===\n",
			tailFrom-headEnd, n-tailFrom)
		store([]byte(marker))
		if !piece(tailFrom, n) {
			return
		}
	}
	u.complete = uploading
}

// read is length bytes of the try from its offset off.
func (u *Uploader) read(off, length int64) ([]byte, error) {
	buf := make([]byte, length)
	k, err := u.f.ReadAt(buf, u.start+off)
	if err == io.EOF && int64(k) == length {
		err = nil
	}
	return buf[:k], err
}

// putChunk puts data as the next chunk, once: false when it did not go (a retry is scheduled,
// or uploading stopped).
func (u *Uploader) putChunk(data []byte) bool {
	url, err := u.chunkURL()
	if err == nil {
		err = u.put(url, data)
	}
	if err != nil {
		u.failed(err)
		return false
	}
	u.acc.add(data)
	u.head += int64(len(data))
	u.seq++
	u.lastFlush, u.failures = time.Now(), 0
	return true
}

// putRetrying puts data as the next chunk, trying again with backoff until it goes, uploading
// stops, or the step's end has waited FinalWait.
func (u *Uploader) putRetrying(data []byte) bool {
	for u.gaveUp == nil {
		if wait := time.Until(u.retryAt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-u.ctx.Done():
			}
			t.Stop()
		}
		if u.ctx.Err() != nil {
			return false
		}
		if u.putChunk(data) {
			return true
		}
	}
	return false
}

func (u *Uploader) putLive(data []byte) bool {
	url, err := u.liveURL()
	if err == nil {
		err = u.put(url, data)
	}
	if err != nil {
		u.failed(err)
		return false
	}
	u.failures = 0
	return true
}

// errForbidden: S3 refused a URL (403): its signature expired with the credentials that made
// it, or it is past its own expiry. Fresh URLs fix it.
var errForbidden = errors.New("S3 answered 403")

// s3Error is S3's answer to a PUT it did not take.
type s3Error struct {
	status int
	code   string
}

func (e *s3Error) Error() string {
	if e.code == "" {
		return fmt.Sprintf("S3 answered %d", e.status)
	}
	return fmt.Sprintf("S3 answered %d %s", e.status, e.code)
}

// transient: another try may succeed. S3's 4xx say the request is wrong, and stay so — but for
// a timeout, a throttle, or a digest spoilt on the way.
func (e *s3Error) transient() bool {
	return e.status >= 500 || e.status == http.StatusRequestTimeout || e.status == http.StatusTooManyRequests ||
		e.code == "BadDigest" || e.code == "RequestTimeout" || e.code == "SlowDown"
}

// put is one PUT of data to a presigned URL, with the Content-MD5 that S3 checks the body by.
func (u *Uploader) put(url string, data []byte) error {
	ctx, cancel := context.WithTimeout(u.ctx, putTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	sum := md5.Sum(data)
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	resp, err := u.o.HTTP.Do(req)
	var ue *neturl.Error
	if errors.As(err, &ue) {
		// Without the URL: a presigned URL may write its chunk until it expires, and the error
		// goes to the agent's log and into the step's message.
		return fmt.Errorf("PUT: %w", ue.Err)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		u.Stats.Puts.Add(1)
		return nil
	case resp.StatusCode == http.StatusForbidden:
		u.Stats.Forbidden.Add(1)
		return errForbidden
	}
	var doc struct {
		Code string `xml:"Code"`
	}
	_ = xml.Unmarshal(body, &doc)
	return &s3Error{status: resp.StatusCode, code: doc.Code}
}

// failed schedules what follows a failure: fresh URLs after a 403, at once the first time (a
// URL that died is the normal end of a batch); for the rest a jittered backoff; a refusal no
// retry changes stops uploading.
func (u *Uploader) failed(err error) {
	u.lastErr = err
	var se *s3Error
	if errors.As(err, &se) && !se.transient() {
		u.stop(err)
		return
	}
	if u.gaveUp != nil || u.ctx.Err() != nil {
		return
	}
	u.Stats.Failures.Add(1)
	u.failures++
	if errors.Is(err, errForbidden) {
		clear(u.urls)
		u.live = ""
		if u.failures == 1 {
			u.retryAt = time.Time{}
			return
		}
	}
	wait := backoff(u.failures, retryCeiling)
	u.retryAt = time.Now().Add(wait)
	if u.failures&(u.failures-1) != 0 && u.failures%20 != 0 {
		return // an outage is logged at its 1st, 2nd, 4th, 8th… failure and every 20th, not every 15 s
	}
	u.log.Warn("step log upload failed; trying again", "error", err.Error(), "seq", u.seq, "failures", u.failures,
		"retry_in", wait.Round(time.Millisecond).String())
}

// stop ends uploading for good: nothing more is put, the rest is only counted.
func (u *Uploader) stop(err error) {
	if u.gaveUp == nil {
		u.gaveUp = err
		u.log.Warn("step log upload stopped", "error", err.Error(), "seq", u.seq)
	}
}

// stale: URLs this close to their expiry are not worth a PUT.
func (u *Uploader) stale() bool {
	return !u.expires.IsZero() && time.Now().After(u.expires.Add(-expiryMargin))
}

// held counts the URLs held from the next chunk on.
func (u *Uploader) held() int {
	n := 0
	for u.urls[u.seq+n] != "" {
		n++
	}
	return n
}

// chunkURL is the next chunk's URL, fetching more before the batch runs out. A fetch that
// fails while a URL is still held waits for the next chunk.
func (u *Uploader) chunkURL() (string, error) {
	if u.stale() {
		clear(u.urls)
		u.live = ""
	}
	if left := u.held(); left < lowWater {
		if err := u.fetch(u.seq + left); err != nil && (left == 0 || u.gaveUp != nil) {
			return "", err
		}
	}
	if url := u.urls[u.seq]; url != "" {
		return url, nil
	}
	return "", fmt.Errorf("the API gave no URL for chunk %d", u.seq)
}

func (u *Uploader) liveURL() (string, error) {
	if u.stale() {
		clear(u.urls)
		u.live = ""
	}
	if u.live == "" {
		if err := u.fetch(u.seq); err != nil {
			return "", err
		}
	}
	if u.live == "" {
		return "", errors.New("the API gave no live tail URL")
	}
	return u.live, nil
}

// fetch asks the source for a batch from chunk from on. A 409 (the step is not this node's
// under this lease any more), a 404 (the stack keeps no logs) or another refusal stops
// uploading: no URL will come.
func (u *Uploader) fetch(from int) error {
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	b, err := u.src(ctx, from, u.o.Batch)
	switch {
	case client.HasCode(err, client.CodeStaleAssignment):
		u.stop(fmt.Errorf("the lease was lost (log-urls answered 409 stale_assignment)"))
		return u.gaveUp
	case client.HasCode(err, codeLogsNotStored):
		u.stop(errors.New("the stack keeps no logs any more (log-urls answered 404 logs_not_stored)"))
		return u.gaveUp
	case err != nil && refused(err):
		u.stop(fmt.Errorf("log-urls refused: %w", err))
		return u.gaveUp
	case err != nil:
		return fmt.Errorf("log-urls: %w", err)
	case b.Try != u.try:
		u.stop(fmt.Errorf("log-urls answered for try %d, not this try (%d)", b.Try, u.try))
		return u.gaveUp
	}
	u.Stats.Batches.Add(1)
	u.take(b, true)
	return nil
}

// take keeps a batch's URLs and when they expire.
func (u *Uploader) take(b *client.LogUpload, fetched bool) {
	for _, c := range b.Chunks {
		if c.Seq >= u.seq {
			u.urls[c.Seq] = c.URL
		}
	}
	if b.Live != "" {
		u.live = b.Live
	}
	if !b.ExpiresAt.IsZero() {
		u.expires = b.ExpiresAt
	}
	if fetched {
		u.log.Debug("step log URLs fetched", "from", u.seq, "chunks", len(b.Chunks), "expires_at", b.ExpiresAt)
	}
}

// IncompleteNote is what a report's message says first when the log is not all stored: why,
// and where the whole of it is. The reason is cut short to leave the output room.
func IncompleteNote(why, path string) string {
	return "log upload incomplete: " + Text([]byte(why), 512, false) + "; the full log is on the node at " + path
}

// attemptLogs are the logs of the attempts whose steps run here, by run, step and attempt: a
// step's tries, each a runner of its own, add to one.
type attemptLogs struct {
	mu sync.Mutex
	m  map[string]*AttemptLog
}

func (l *attemptLogs) get(key string) *AttemptLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*AttemptLog{}
	}
	if l.m[key] == nil {
		l.m[key] = NewAttemptLog()
	}
	return l.m[key]
}

func (l *attemptLogs) drop(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}

// keepRun forgets the logs of every other run: a new lease's steps are all there is to
// report.
func (l *attemptLogs) keepRun(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.m {
		if !strings.HasPrefix(k, runID+"/") {
			delete(l.m, k)
		}
	}
}

// Package steplogs keeps steps' logs in S3 (LOG_BUCKET): the keys, which only the server
// builds; the presigned PUT URLs the node running a step uploads its output through; the
// listing that tells a reader which chunks exist, with presigned GET URLs to read them; and
// the removal of a run's logs with the run. The store decides who may have URLs (the fence)
// and keeps what terminal reports said of a log; this package never reads the database.
//
// A log's keys, each segment url.PathEscape'd:
//
//	<owner>/<run key>/<attempt>/<step id>/<try>/<epoch>/<seq, eight digits>   a chunk
//	<owner>/<run key>/<attempt>/<step id>/<try>/<epoch>/live                  a capped try's live tail
//
// A try's log is its chunks in seq order; the step's log in an attempt is its tries' logs in
// try order. The attempt is in the key, so whatever a node uploads under a lease it lost is
// filed under an attempt that is over, and is never read as a later attempt's log; the epoch is
// in the key, so two leases of one attempt's try (a run key reused after a prune) never mix.
package steplogs

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"mediator/shared/config"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// How long presigned URLs live: an upload batch long enough that a step flushing every few
// seconds asks for URLs rarely, a read short enough that a URL passed on goes stale soon. Never
// past the signing credentials' expiry (signedFor).
const (
	putURLsLast = 15 * time.Minute
	getURLsLast = 5 * time.Minute
)

// MaxChunksRead bounds the chunks one answer of the reader lists: each is a presigned URL of
// about a kilobyte (1.4 with a Lambda session token), and an answer must stay under Lambda's 6
// MB. A log of more chunks is read in pages: the answer says more, and the next read starts
// from the offset the reader has reached.
const MaxChunksRead = 2000

// readContentType is what a presigned GET answers a chunk as, whatever its PUT said: a
// node-chosen text/html would otherwise open as a page on the bucket's origin.
const readContentType = "text/plain; charset=utf-8"

// Bucket is the stack's log bucket.
type Bucket struct {
	name    string
	client  *s3.Client
	presign *s3.PresignClient
	set     config.Logs
}

// NewClient is the S3 client of an AWS configuration (config.LoadDefaultConfig's in a function,
// AWS_ENDPOINT_URL_S3 included). With an endpoint of its own — a local stand-in — requests are
// path-style, which a host name such as localhost needs and an IP-literal gets anyway.
func NewClient(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
	})
}

// New is the bucket set names (set.Bucket), reached through client.
func New(client *s3.Client, set config.Logs) *Bucket {
	return &Bucket{name: set.Bucket, client: client, presign: s3.NewPresignClient(client), set: set}
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// segment is one part of a key as written: escaped, so that no name can add a "/" of its own.
func segment(s string) string { return url.PathEscape(s) }

// runPrefix holds every log of a run.
func runPrefix(owner, runKey string) string { return segment(owner) + "/" + segment(runKey) + "/" }

// stepPrefix holds a step's log of one attempt: every try, every epoch.
func stepPrefix(owner, runKey string, attempt int, stepID string) string {
	return runPrefix(owner, runKey) + strconv.Itoa(attempt) + "/" + segment(stepID) + "/"
}

// tryPrefix holds one try's chunks and live tail.
func tryPrefix(t store.LogTarget) string {
	return stepPrefix(t.Owner, t.RunKey, t.Attempt, t.StepID) + strconv.Itoa(t.Try) + "/" + strconv.FormatInt(t.Epoch, 10) + "/"
}

// ChunkKey is where chunk seq of the try goes.
func ChunkKey(t store.LogTarget, seq int) string { return tryPrefix(t) + fmt.Sprintf("%08d", seq) }

// LiveKey is where the try's live tail goes, once past its cap.
func LiveKey(t store.LogTarget) string { return tryPrefix(t) + liveName }

const liveName = "live"

// RunPrefix is where every log of a run is kept.
func RunPrefix(owner, runKey string) string { return runPrefix(owner, runKey) }

// Upload is a batch of upload URLs for one try, and the rules the agent uploads by
// (client.LogUpload on the wire).
type Upload struct {
	Try           int        `json:"try"`
	Epoch         int64      `json:"epoch"`
	Chunks        []ChunkURL `json:"chunks"`
	Live          string     `json:"live_url"`
	ExpiresAt     time.Time  `json:"expires_at"`
	ChunkMaxBytes int64      `json:"chunk_max_bytes"`
	MaxBytes      int64      `json:"max_bytes"`
	TailBytes     int64      `json:"tail_bytes"`
	FlushSeconds  float64    `json:"flush_seconds"`
}

// ChunkURL is where chunk Seq goes.
type ChunkURL struct {
	Seq int    `json:"seq"`
	URL string `json:"url"`
}

// UploadURLs presigns PUTs of chunks from to from+count-1 of t's try, and of its live tail.
// Whoever holds a URL may write that one key until it expires, and nothing else: the store
// decided who may have them.
func (b *Bucket) UploadURLs(ctx context.Context, t store.LogTarget, from, count int) (Upload, error) {
	last, signedAt, err := b.signedFor(ctx, putURLsLast)
	if err != nil {
		return Upload{}, err
	}
	put := func(key string) (string, error) {
		req, err := b.presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: &b.name, Key: &key}, s3.WithPresignExpires(last))
		if err != nil {
			return "", fmt.Errorf("steplogs: presign a PUT: %w", err)
		}
		return req.URL, nil
	}
	u := Upload{
		Try: t.Try, Epoch: t.Epoch, Chunks: make([]ChunkURL, 0, count), ExpiresAt: signedAt.Add(last),
		ChunkMaxBytes: wire.LogChunkMaxBytes, MaxBytes: b.set.MaxBytesPerStep, TailBytes: b.set.TailBytes,
		FlushSeconds: b.set.Flush.Seconds(),
	}
	for seq := from; seq < from+count; seq++ {
		link, err := put(ChunkKey(t, seq))
		if err != nil {
			return Upload{}, err
		}
		u.Chunks = append(u.Chunks, ChunkURL{Seq: seq, URL: link})
	}
	if u.Live, err = put(LiveKey(t)); err != nil {
		return Upload{}, err
	}
	return u, nil
}

// signedFor is how long URLs signed now may live, want at most: no longer than the credentials
// that sign them, which S3 checks too — a URL outliving its session would be refused early,
// and its expires_at would lie. signedAt is now, to the second the signature carries, so that
// now + last is never later than the URL's true end.
func (b *Bucket) signedFor(ctx context.Context, want time.Duration) (last time.Duration, signedAt time.Time, err error) {
	signedAt = time.Now().Truncate(time.Second)
	creds, err := b.client.Options().Credentials.Retrieve(ctx)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("steplogs: the credentials to sign with: %w", err)
	}
	last = want
	if creds.CanExpire {
		if left := creds.Expires.Sub(signedAt).Truncate(time.Second); left < last {
			last = max(left, time.Second)
		}
	}
	return last, signedAt, nil
}

// Log is a step's log as it stands, for its reader (client.StepLog on the wire).
type Log struct {
	RunID     string    `json:"run_id"`
	StepID    string    `json:"step_id"`
	Attempt   int       `json:"attempt"`
	State     string    `json:"state"`
	Stored    bool      `json:"stored"`
	Complete  bool      `json:"complete"`
	Bytes     *int64    `json:"bytes"`
	SHA256    *string   `json:"sha256"`
	ExpiresAt time.Time `json:"expires_at"`
	Chunks    []Chunk   `json:"chunks"`
	// More: chunks past the last one listed exist; read again from where these end.
	More bool  `json:"more"`
	Live *Live `json:"live"`
}

// Chunk is one stored chunk; Offset is where its bytes start in the log.
type Chunk struct {
	Try    int    `json:"try"`
	Seq    int    `json:"seq"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	URL    string `json:"url"`
}

// Live is a capped try's live tail while it runs.
type Live struct {
	Try   int    `json:"try"`
	Bytes int64  `json:"bytes"`
	URL   string `json:"url"`
}

// NotStored is the log of a stack that keeps none: nothing to read, and never complete.
func NotStored(f store.StepLogFacts) Log {
	return Log{RunID: f.RunID, StepID: f.StepID, Attempt: f.Attempt, State: f.State, Chunks: []Chunk{}, ExpiresAt: time.Now().UTC().Truncate(time.Second)}
}

// object is one listed object of a step's attempt, by what its key says.
type object struct {
	try   int
	epoch int64
	seq   int // -1 for the live tail
	bytes int64
}

// Read is the log f names as the bucket holds it: one listing of the attempt's prefix (paged),
// a presigned GET per chunk shown. Which chunks exist is the listing's to say — no row is kept
// per chunk — and the listing decides what is shown:
//
//   - per try, the chunks of one epoch: the step's while it is the run's current attempt and
//     the step has one, else the greatest found;
//   - in try order, each try's chunks from 0 in seq order, ending at the first gap or the first
//     chunk larger than a chunk may be (a URL bounds no size: a node that wrote more than the
//     rules allow has it left out, not handed to readers);
//   - of those, the chunks that end past from, at most MaxChunksRead (More says whether
//     others follow): one read of a long log is a page, the listing still whole;
//   - complete only when the step is final in that attempt, its node's report said every chunk
//     was uploaded, nothing was cut, and the chunks add up to the size the report gave.
func (b *Bucket) Read(ctx context.Context, f store.StepLogFacts, from int64) (Log, error) {
	prefix := stepPrefix(f.Owner, f.RunKey, f.Attempt, f.StepID)
	objects, err := b.list(ctx, prefix)
	if err != nil {
		return Log{}, err
	}
	last, signedAt, err := b.signedFor(ctx, getURLsLast)
	if err != nil {
		return Log{}, err
	}
	get := func(key string) (string, error) {
		req, err := b.presign.PresignGetObject(ctx, &s3.GetObjectInput{
			Bucket: &b.name, Key: &key, ResponseContentType: aws.String(readContentType),
		}, s3.WithPresignExpires(last))
		if err != nil {
			return "", fmt.Errorf("steplogs: presign a GET: %w", err)
		}
		return req.URL, nil
	}
	log := Log{RunID: f.RunID, StepID: f.StepID, Attempt: f.Attempt, State: f.State, Stored: true,
		Chunks: []Chunk{}, ExpiresAt: signedAt.Add(last)}
	shown, live, cut := choose(objects, f)
	var offset int64
	for _, o := range shown {
		start := offset
		offset += o.bytes
		if offset <= from && !(o.bytes == 0 && start == from) {
			continue // read before
		}
		if len(log.Chunks) == MaxChunksRead {
			log.More = true
			continue
		}
		t := store.LogTarget{Owner: f.Owner, RunKey: f.RunKey, Attempt: f.Attempt, StepID: f.StepID, Try: o.try, Epoch: o.epoch}
		link, err := get(ChunkKey(t, o.seq))
		if err != nil {
			return Log{}, err
		}
		log.Chunks = append(log.Chunks, Chunk{Try: o.try, Seq: o.seq, Offset: start, Bytes: o.bytes, URL: link})
	}
	if live != nil {
		t := store.LogTarget{Owner: f.Owner, RunKey: f.RunKey, Attempt: f.Attempt, StepID: f.StepID, Try: live.try, Epoch: live.epoch}
		link, err := get(LiveKey(t))
		if err != nil {
			return Log{}, err
		}
		log.Live = &Live{Try: live.try, Bytes: live.bytes, URL: link}
	}
	if s := f.Summary; s != nil && wire.Final(f.State) && s.Uploaded && !cut && offset == s.Bytes {
		log.Complete, log.Bytes, log.SHA256 = true, &s.Bytes, &s.SHA256
	}
	return log, nil
}

// choose picks what Read shows of the objects listed (Read says the rules): the chunks in log
// order, the live tail of the try running now if it has one, and whether the listing was cut.
func choose(objects []object, f store.StepLogFacts) (shown []object, live *object, cut bool) {
	epochs := map[int]int64{} // the epoch shown of each try
	for _, o := range objects {
		if f.Current && f.Epoch != nil {
			epochs[o.try] = *f.Epoch
		} else if o.epoch > epochs[o.try] {
			epochs[o.try] = o.epoch
		}
	}
	byTry := map[int][]object{}
	for _, o := range objects {
		if o.epoch != epochs[o.try] {
			continue
		}
		if o.seq < 0 {
			// A live tail is news only while its try runs; once the try ended, its tail is in
			// numbered chunks.
			if f.Current && f.State == wire.Running && o.try == f.Tries && o.bytes > 0 && o.bytes <= wire.LogChunkMaxBytes {
				live = &o
			}
			continue
		}
		byTry[o.try] = append(byTry[o.try], o)
	}
	tries := make([]int, 0, len(byTry))
	for try := range byTry {
		tries = append(tries, try)
	}
	sort.Ints(tries)
	for _, try := range tries {
		chunks := byTry[try]
		sort.Slice(chunks, func(i, j int) bool { return chunks[i].seq < chunks[j].seq })
		for i, o := range chunks {
			if o.seq != i || o.bytes > wire.LogChunkMaxBytes {
				return shown, live, true
			}
			shown = append(shown, o)
		}
	}
	return shown, live, false
}

// list is every object under prefix whose key is a chunk's or a live tail's, by what the key
// says; anything else there (nothing the server signs) is passed over.
func (b *Bucket) list(ctx context.Context, prefix string) ([]object, error) {
	var out []object
	pages := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.name, Prefix: &prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("steplogs: list %s: %w", prefix, err)
		}
		for _, o := range page.Contents {
			if o.Key == nil || o.Size == nil {
				continue
			}
			if obj, ok := parseKey(strings.TrimPrefix(*o.Key, prefix)); ok {
				obj.bytes = *o.Size
				out = append(out, obj)
			}
		}
	}
	return out, nil
}

// parseKey reads "<try>/<epoch>/<seq>" or "<try>/<epoch>/live", as ChunkKey and LiveKey write
// them after a step's prefix.
func parseKey(rest string) (object, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return object{}, false
	}
	try, err := strconv.Atoi(parts[0])
	if err != nil || try < 1 || strconv.Itoa(try) != parts[0] {
		return object{}, false
	}
	epoch, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || epoch < 1 || strconv.FormatInt(epoch, 10) != parts[1] {
		return object{}, false
	}
	o := object{try: try, epoch: epoch, seq: -1}
	if parts[2] == liveName {
		return o, true
	}
	seq, err := strconv.Atoi(parts[2])
	if err != nil || len(parts[2]) != 8 || seq < 0 {
		return object{}, false
	}
	o.seq = seq
	return o, true
}

// RemoveRun deletes every log of a run: its prefix listed, a page at a time, each page deleted
// in one DeleteObjects (S3 takes up to 1,000 keys, a page's most).
func (b *Bucket) RemoveRun(ctx context.Context, r store.PrunedRun) error {
	prefix := runPrefix(r.Owner, r.Key)
	pages := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.name, Prefix: &prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("steplogs: list %s: %w", prefix, err)
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		out, err := b.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &b.name, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return fmt.Errorf("steplogs: delete under %s: %w", prefix, err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("steplogs: delete under %s: %d keys refused, the first %s: %s", prefix, len(out.Errors),
				aws.ToString(e.Key), aws.ToString(e.Code))
		}
	}
	return nil
}

// Origin is the scheme and host (and port) the bucket's presigned URLs point at — S3's
// endpoint for the bucket in AWS, the local S3 under make dev — which a page that reads logs
// through them must be allowed to connect to (the console's Content-Security-Policy). It is
// read off a URL presigned here, so it is whatever addressing the client uses.
func (b *Bucket) Origin(ctx context.Context) (string, error) {
	key := "origin"
	req, err := b.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &b.name, Key: &key}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		return "", fmt.Errorf("steplogs: presign a GET: %w", err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", fmt.Errorf("steplogs: a presigned URL: %w", err)
	}
	return u.Scheme + "://" + u.Host, nil
}

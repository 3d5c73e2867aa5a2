package s3_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	locals3 "mediator/localdev/s3"
)

// clock is a server clock that a test moves by hand, so expiry is tested without waiting.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// start is a server with a bucket "logs" (unless o names others), closed with the test.
func start(t *testing.T, o locals3.Options) *locals3.Server {
	t.Helper()
	if o.Buckets == nil {
		o.Buckets = []string{"logs"}
	}
	srv, err := locals3.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// noRetry makes the SDK client report the server's first answer.
func noRetry(o *s3.Options) { o.RetryMaxAttempts = 1 }

func withCredentials(key, secret, token string) func(*s3.Options) {
	return func(o *s3.Options) { o.Credentials = credentials.NewStaticCredentialsProvider(key, secret, token) }
}

// refusal is the code and HTTP status of an SDK call's error.
func refusal(t *testing.T, err error) (string, int) {
	t.Helper()
	if err == nil {
		t.Fatal("the call succeeded; a refusal was expected")
	}
	var api smithy.APIError
	var resp *awshttp.ResponseError
	if !errors.As(err, &api) || !errors.As(err, &resp) {
		t.Fatalf("not an S3 error answer: %v", err)
	}
	return api.ErrorCode(), resp.HTTPStatusCode()
}

func wantRefusal(t *testing.T, err error, code string, status int) {
	t.Helper()
	if c, s := refusal(t, err); c != code || s != status {
		t.Fatalf("refused with %s (%d), want %s (%d): %v", c, s, code, status, err)
	}
}

// s3Error is S3's error document as a plain HTTP client reads it.
type s3Error struct {
	Code             string
	Message          string
	HeadersNotSigned string
}

// send does a plain net/http request, as a node holding a presigned URL does.
func send(t *testing.T, req *http.Request) (int, []byte, s3Error) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e s3Error
	if resp.StatusCode >= 300 {
		if err := xml.Unmarshal(body, &e); err != nil {
			t.Fatalf("status %d with a body that is not S3's error document: %q", resp.StatusCode, body)
		}
	}
	return resp.StatusCode, body, e
}

func put(t *testing.T, c *s3.Client, bucket, key, body string) {
	t.Helper()
	if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
	}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, c *s3.Client, bucket, key string, optFns ...func(*s3.GetObjectInput)) (*s3.GetObjectOutput, string) {
	t.Helper()
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	for _, fn := range optFns {
		fn(in)
	}
	out, err := c.GetObject(context.Background(), in)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return out, string(b)
}

func quotedMD5(s string) string {
	sum := md5.Sum([]byte(s))
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func keys(infos []locals3.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, o := range infos {
		out[i] = o.Key
	}
	return out
}

// signedRequest is a request signed in its header by the SDK's own signer, at a given time,
// with a given secret and payload hash: what a client could send but the SDK client never does.
func signedRequest(t *testing.T, srv *locals3.Server, method, path string, body []byte, payloadHash string, at time.Time, secret string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return signAt(t, srv, req, payloadHash, at, secret)
}

// signAt signs req in its header, every header it has included, as the SDK's signer does.
func signAt(t *testing.T, srv *locals3.Server, req *http.Request, payloadHash string, at time.Time, secret string) *http.Request {
	t.Helper()
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: locals3.DefaultAccessKeyID, SecretAccessKey: secret}
	if err := signer.SignHTTP(context.Background(), creds, req, payloadHash, "s3", srv.Region(), at); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestPutGetHeadListDelete(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client()
	ctx := context.Background()
	const key = "runs/r1/steps/s1/000001"
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("logs"), Key: aws.String(key), Body: strings.NewReader("hello log"),
		ContentType: aws.String("text/plain; charset=utf-8"),
	}); err != nil {
		t.Fatal(err)
	}

	out, body := get(t, c, "logs", key)
	if body != "hello log" || aws.ToString(out.ContentType) != "text/plain; charset=utf-8" ||
		aws.ToString(out.ETag) != quotedMD5("hello log") || aws.ToInt64(out.ContentLength) != 9 {
		t.Fatalf("got %q, %s, %s, %d", body, aws.ToString(out.ContentType), aws.ToString(out.ETag), aws.ToInt64(out.ContentLength))
	}
	// The SDK sends a CRC32 of every PutObject body by default; it was verified and kept.
	if _, info, _ := srv.Object("logs", key); info.ChecksumAlgorithm != "crc32" || info.Checksum != aws.ToString(out.ChecksumCRC32) {
		t.Fatalf("kept checksum %s %q, answered %q", info.ChecksumAlgorithm, info.Checksum, aws.ToString(out.ChecksumCRC32))
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)})
	if err != nil || aws.ToInt64(head.ContentLength) != 9 || aws.ToString(head.ETag) != quotedMD5("hello log") {
		t.Fatalf("head: %+v, %v", head, err)
	}

	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), Prefix: aws.String("runs/r1/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 1 || aws.ToInt32(list.KeyCount) != 1 || aws.ToBool(list.IsTruncated) {
		t.Fatalf("list: %+v", list)
	}
	o := list.Contents[0]
	if aws.ToString(o.Key) != key || aws.ToInt64(o.Size) != 9 || aws.ToString(o.ETag) != quotedMD5("hello log") ||
		time.Since(aws.ToTime(o.LastModified)) > time.Minute {
		t.Fatalf("listed %s %d %s %v", aws.ToString(o.Key), aws.ToInt64(o.Size), aws.ToString(o.ETag), o.LastModified)
	}

	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)})
	if nsk := (*types.NoSuchKey)(nil); !errors.As(err, &nsk) {
		t.Fatalf("get after delete: %v, want NoSuchKey", err)
	}
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)})
	if nf := (*types.NotFound)(nil); !errors.As(err, &nf) {
		t.Fatalf("head after delete: %v, want NotFound", err)
	}
	// Deleting what is not there succeeds, as in S3.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("logs"), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	if left := srv.Objects("logs"); len(left) != 0 {
		t.Fatalf("left: %v", keys(left))
	}
	want := map[string]int{"PutObject": 1, "GetObject": 2, "HeadObject": 2, "ListObjectsV2": 1, "DeleteObject": 2}
	if got := srv.Requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	// HEAD's 404 has no body to name its code; the server counts it as the NoSuchKey it is.
	if got := srv.Refused(); fmt.Sprint(got) != fmt.Sprint(map[string]int{"NoSuchKey": 2}) {
		t.Fatalf("refused %v", got)
	}
}

func TestGetRange(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client(noRetry)
	put(t, c, "logs", "chunk", "0123456789")
	for _, tc := range []struct{ rng, body, contentRange string }{
		{"bytes=3-", "3456789", "bytes 3-9/10"},
		{"bytes=2-4", "234", "bytes 2-4/10"},
		{"bytes=8-100", "89", "bytes 8-9/10"},
		{"bytes=-3", "789", "bytes 7-9/10"},
		{"bytes=0-0", "0", "bytes 0-0/10"},
	} {
		out, body := get(t, c, "logs", "chunk", func(in *s3.GetObjectInput) { in.Range = aws.String(tc.rng) })
		if body != tc.body || aws.ToString(out.ContentRange) != tc.contentRange || aws.ToInt64(out.ContentLength) != int64(len(tc.body)) {
			t.Errorf("%s: %q %s %d, want %q %s", tc.rng, body, aws.ToString(out.ContentRange), aws.ToInt64(out.ContentLength), tc.body, tc.contentRange)
		}
	}
	// A reader that tails a log asks from its end: nothing new is 416, not an empty 206.
	_, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String("chunk"), Range: aws.String("bytes=10-")})
	wantRefusal(t, err, "InvalidRange", http.StatusRequestedRangeNotSatisfiable)
	// A Range it cannot read is ignored, and the whole object answered.
	if out, body := get(t, c, "logs", "chunk", func(in *s3.GetObjectInput) { in.Range = aws.String("bytes=5-2") }); body != "0123456789" || out.ContentRange != nil {
		t.Fatalf("bytes=5-2: %q %v", body, out.ContentRange)
	}
	head, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("logs"), Key: aws.String("chunk"), Range: aws.String("bytes=4-")})
	if err != nil || aws.ToInt64(head.ContentLength) != 6 {
		t.Fatalf("head with range: %v %v", head, err)
	}
}

func TestListObjectsV2Pages(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client()
	ctx := context.Background()
	var want []string
	for i := range 25 {
		k := fmt.Sprintf("runs/r1/chunk-%03d", i)
		want = append(want, k)
		put(t, c, "logs", k, "x")
	}
	put(t, c, "logs", "runs/r10/chunk-000", "other run")
	put(t, c, "logs", "runs/r0/chunk-000", "other run")

	var got []string
	var pages []int
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), Prefix: aws.String("runs/r1/"), MaxKeys: aws.Int32(10)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, len(page.Contents))
		for _, o := range page.Contents {
			got = append(got, aws.ToString(o.Key))
		}
	}
	if !slices.Equal(got, want) || !slices.Equal(pages, []int{10, 10, 5}) {
		t.Fatalf("pages %v of %v, want 10,10,5 of %v", pages, got, want)
	}

	after, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), Prefix: aws.String("runs/r1/"), StartAfter: aws.String("runs/r1/chunk-022")})
	if err != nil || len(after.Contents) != 2 || aws.ToString(after.Contents[0].Key) != "runs/r1/chunk-023" || aws.ToString(after.StartAfter) != "runs/r1/chunk-022" {
		t.Fatalf("start-after: %+v %v", after, err)
	}
	_, err = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), ContinuationToken: aws.String("not a token")}, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	wantRefusal(t, err, "InvalidArgument", http.StatusBadRequest)
	_, err = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("nope")}, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	wantRefusal(t, err, "NoSuchBucket", http.StatusNotFound)
}

func TestListObjectsV2Delimiter(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client()
	for _, k := range []string{"run/a/1", "run/a/2", "run/b/1", "run/c", "run/d/1", "run/d/2", "run/e", "zzz"} {
		put(t, c, "logs", k, "x")
	}
	var got []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{
		Bucket: aws.String("logs"), Prefix: aws.String("run/"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(2),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n := len(page.Contents) + len(page.CommonPrefixes); n != int(aws.ToInt32(page.KeyCount)) || n > 2 {
			t.Fatalf("a page of %d items says KeyCount %d", n, aws.ToInt32(page.KeyCount))
		}
		for _, cp := range page.CommonPrefixes {
			got = append(got, "prefix "+aws.ToString(cp.Prefix))
		}
		for _, o := range page.Contents {
			got = append(got, "key "+aws.ToString(o.Key))
		}
	}
	// Within a page the SDK holds prefixes and keys apart; across pages each appears once, in order.
	want := []string{"prefix run/a/", "prefix run/b/", "prefix run/d/", "key run/c", "key run/e"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDeleteObjects(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client()
	ctx := context.Background()
	for i := range 5 {
		put(t, c, "logs", fmt.Sprintf("runs/old/%d", i), "x")
	}
	put(t, c, "logs", "runs/kept/0", "x")
	var ids []types.ObjectIdentifier
	for _, k := range []string{"runs/old/0", "runs/old/1", "runs/old/2", "runs/old/never-was"} {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("logs"), Delete: &types.Delete{Objects: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Deleted) != 4 || len(out.Errors) != 0 {
		t.Fatalf("deleted %d, errors %v", len(out.Deleted), out.Errors)
	}
	quiet, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("logs"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("runs/old/3")}, {Key: aws.String("runs/old/4")}}, Quiet: aws.Bool(true),
	}})
	if err != nil || len(quiet.Deleted) != 0 || len(quiet.Errors) != 0 {
		t.Fatalf("quiet: %+v %v", quiet, err)
	}
	if left := keys(srv.Objects("logs")); !slices.Equal(left, []string{"runs/kept/0"}) {
		t.Fatalf("left %v", left)
	}

	// S3 wants a batch delete's body proven; a request without Content-MD5 or a checksum is refused.
	body := []byte(`<Delete><Object><Key>runs/kept/0</Key></Object></Delete>`)
	req := signedRequest(t, srv, http.MethodPost, "/logs?delete", body, sha256Hex(body), time.Now(), locals3.DefaultSecretAccessKey)
	if status, _, e := send(t, req); status != http.StatusBadRequest || e.Code != "InvalidRequest" {
		t.Fatalf("without a digest: %d %+v", status, e)
	}
	if left := keys(srv.Objects("logs")); !slices.Equal(left, []string{"runs/kept/0"}) {
		t.Fatalf("left %v", left)
	}
}

func TestCreateAndHeadBucket(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{Region: "eu-west-1", Buckets: []string{}})
	c := srv.Client(noRetry)
	ctx := context.Background()
	in := &s3.CreateBucketInput{Bucket: aws.String("mediator-logs"), CreateBucketConfiguration: &types.CreateBucketConfiguration{
		LocationConstraint: types.BucketLocationConstraintEuWest1,
	}}
	if _, err := c.CreateBucket(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("mediator-logs")}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateBucket(ctx, in)
	wantRefusal(t, err, "BucketAlreadyOwnedByYou", http.StatusConflict)
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("elsewhere"), CreateBucketConfiguration: &types.CreateBucketConfiguration{
		LocationConstraint: types.BucketLocationConstraintApSouth1,
	}})
	wantRefusal(t, err, "IllegalLocationConstraintException", http.StatusBadRequest)
	_, err = c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("missing")})
	if nf := (*types.NotFound)(nil); !errors.As(err, &nf) {
		t.Fatalf("head of a missing bucket: %v", err)
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("missing"), Key: aws.String("k"), Body: strings.NewReader("x")})
	wantRefusal(t, err, "NoSuchBucket", http.StatusNotFound)
	put(t, c, "mediator-logs", "k", "x")
}

// The SDK addresses an IP-literal endpoint path-style without being told, so a process that
// takes AWS_ENDPOINT_URL_S3 alone reaches the server.
func TestPathStyleWithoutUsePathStyle(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client(func(o *s3.Options) { o.UsePathStyle = false })
	put(t, c, "logs", "k", "virtual-hosted would not resolve")
	if _, body := get(t, c, "logs", "k"); body != "virtual-hosted would not resolve" {
		t.Fatal(body)
	}
}

func TestKeysThatNeedEncoding(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client()
	ctx := context.Background()
	names := []string{"runs/r 1/step+2/ü~*(x)!.log", "a/b=c&d?e#f", "percent/%41%2F", "spaces/  two  ", "slashes//double/"}
	for _, k := range names {
		put(t, c, "logs", k, k)
		if _, body := get(t, c, "logs", k); body != k {
			t.Fatalf("%q read back as %q", k, body)
		}
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs")})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, o := range list.Contents {
		listed = append(listed, aws.ToString(o.Key))
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %q, want %q", listed, want)
	}
	enc, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), EncodingType: types.EncodingTypeUrl, Prefix: aws.String("runs/")})
	if err != nil || len(enc.Contents) != 1 {
		t.Fatalf("encoding-type=url: %+v %v", enc, err)
	}
	if k, err := url.QueryUnescape(aws.ToString(enc.Contents[0].Key)); err != nil || k != names[0] {
		t.Fatalf("url-encoded key %q decodes to %q", aws.ToString(enc.Contents[0].Key), k)
	}

	// A presigned URL for such a key works as the SDK writes it.
	presigner := srv.PresignClient()
	up, err := presigner.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String(names[0])})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(up.Method, up.URL, strings.NewReader("by presigned URL"))
	if status, body, _ := send(t, req); status != http.StatusOK {
		t.Fatalf("presigned put: %d %s", status, body)
	}
	down, err := presigner.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String(names[0])})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(down.Method, down.URL, nil)
	if status, body, _ := send(t, req); status != http.StatusOK || string(body) != "by presigned URL" {
		t.Fatalf("presigned get: %d %q", status, body)
	}
}

func TestUnsupportedOperations(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client(noRetry)
	ctx := context.Background()
	_, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("logs"), Key: aws.String("k")})
	wantRefusal(t, err, "NotImplemented", http.StatusNotImplemented)
	_, err = c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("logs")})
	wantRefusal(t, err, "NotImplemented", http.StatusNotImplemented)
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("logs"), Key: aws.String("b"), CopySource: aws.String("logs/a")})
	wantRefusal(t, err, "NotImplemented", http.StatusNotImplemented)
	if got := srv.Requests()["Unsupported"]; got != 3 {
		t.Fatalf("unsupported counted %d", got)
	}
}

func TestDirKeepsObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := start(t, locals3.Options{Dir: dir})
	c := first.Client()
	put(t, c, "logs", "runs/r1/0", "kept across restarts")
	put(t, c, "logs", "runs/r1/1", "deleted before the restart")
	if _, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("logs"), Key: aws.String("runs/r1/1")}); err != nil {
		t.Fatal(err)
	}
	_ = first.Close()

	second := start(t, locals3.Options{Dir: dir, Buckets: []string{}})
	if got := keys(second.Objects("logs")); !slices.Equal(got, []string{"runs/r1/0"}) {
		t.Fatalf("after restart: %v", got)
	}
	out, body := get(t, second.Client(), "logs", "runs/r1/0")
	if body != "kept across restarts" || aws.ToString(out.ETag) != quotedMD5(body) {
		t.Fatalf("%q %s", body, aws.ToString(out.ETag))
	}
}

func TestStartRefusesHalfACredential(t *testing.T) {
	t.Parallel()
	if _, err := locals3.Start(t.Context(), locals3.Options{AccessKeyID: "only-a-key"}); err == nil {
		t.Fatal("started with a key and no secret")
	}
	if _, err := locals3.Start(t.Context(), locals3.Options{Buckets: []string{"Not_A_Bucket"}}); err == nil {
		t.Fatal("started with an invalid bucket name")
	}
}

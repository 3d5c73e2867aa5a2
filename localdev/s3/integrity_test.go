package s3_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	locals3 "mediator/localdev/s3"
)

func b64MD5(s string) string {
	sum := md5.Sum([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func b64SHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func TestContentMD5(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client(noRetry)
	ctx := context.Background()
	putMD5 := func(key, body, md5 string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String(key), Body: strings.NewReader(body), ContentMD5: aws.String(md5)})
		return err
	}
	wantRefusal(t, putMD5("bad", "what was sent", b64MD5("what was meant")), "BadDigest", http.StatusBadRequest)
	wantRefusal(t, putMD5("invalid", "what was sent", "not-an-md5"), "InvalidDigest", http.StatusBadRequest)
	if err := putMD5("good", "what was sent", b64MD5("what was sent")); err != nil {
		t.Fatal(err)
	}
	if got := keys(srv.Objects("logs")); len(got) != 1 || got[0] != "good" {
		t.Fatalf("stored %v", got)
	}
}

// Each checksum the SDK can send is verified, kept, and answered to GetObject when asked,
// where the SDK verifies it in turn.
func TestChecksums(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	c := srv.Client(noRetry)
	ctx := context.Background()
	for _, alg := range []types.ChecksumAlgorithm{
		types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc64nvme,
		types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256,
	} {
		key := "by-" + string(alg)
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String(key), Body: strings.NewReader("checked " + key), ChecksumAlgorithm: alg})
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		sent := aws.ToString(firstNonNil(out.ChecksumCRC32, out.ChecksumCRC32C, out.ChecksumCRC64NVME, out.ChecksumSHA1, out.ChecksumSHA256))
		got, body := get(t, c, "logs", key, func(in *s3.GetObjectInput) { in.ChecksumMode = types.ChecksumModeEnabled })
		answered := aws.ToString(firstNonNil(got.ChecksumCRC32, got.ChecksumCRC32C, got.ChecksumCRC64NVME, got.ChecksumSHA1, got.ChecksumSHA256))
		if body != "checked "+key || sent == "" || answered != sent {
			t.Fatalf("%s: put answered %q, get answered %q", alg, sent, answered)
		}
		if _, info, _ := srv.Object("logs", key); !strings.EqualFold(info.ChecksumAlgorithm, string(alg)) {
			t.Fatalf("%s kept as %q", alg, info.ChecksumAlgorithm)
		}
	}

	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String("wrong"), Body: strings.NewReader("sent"), ChecksumSHA256: aws.String(b64SHA256("meant"))})
	wantRefusal(t, err, "BadDigest", http.StatusBadRequest)
	if _, _, ok := srv.Object("logs", "wrong"); ok {
		t.Fatal("stored despite its checksum")
	}
}

func firstNonNil(ps ...*string) *string {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// A presigned PUT can bind the body's SHA-256: the node must send that checksum, and a body
// that does not match it is refused.
func TestPresignedPutWithChecksum(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	const body = "a chunk whose digest the API knew"
	p, err := srv.PresignClient().PresignPutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String("logs"), Key: aws.String("chunk"), ChecksumSHA256: aws.String(b64SHA256(body)),
	}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if status, _, e := send(t, uploadRequest(t, p, "another chunk")); status != http.StatusBadRequest || e.Code != "BadDigest" {
		t.Fatalf("another body: %d %+v", status, e)
	}
	req := uploadRequest(t, p, body)
	req.Header.Del("X-Amz-Checksum-Sha256")
	if status, _, e := send(t, req); status != http.StatusForbidden || e.Code != "SignatureDoesNotMatch" {
		t.Fatalf("without the signed checksum: %d %+v", status, e)
	}
	if status, b, _ := send(t, uploadRequest(t, p, body)); status != http.StatusOK {
		t.Fatalf("the right body: %d %s", status, b)
	}
}

func TestTwoChecksumsAreRefused(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	req, _ := http.NewRequest(http.MethodPut, srv.URL()+"/logs/k", strings.NewReader("x"))
	req.Header.Set("X-Amz-Checksum-Sha256", b64SHA256("x"))
	req.Header.Set("X-Amz-Checksum-Crc32", "jNiOYQ==")
	req = signAt(t, srv, req, sha256Hex([]byte("x")), time.Now(), locals3.DefaultSecretAccessKey)
	if status, _, e := send(t, req); status != http.StatusBadRequest || e.Code != "InvalidRequest" {
		t.Fatalf("%d %+v", status, e)
	}
}

func TestObjectSizeLimit(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{MaxObjectSize: 8})
	c := srv.Client(noRetry)
	ctx := context.Background()
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String("big"), Body: strings.NewReader("123456789")})
	wantRefusal(t, err, "EntityTooLarge", http.StatusBadRequest)
	put(t, c, "logs", "fits", "12345678")

	p := presignPut(t, srv, time.Minute)
	// Larger than net/http discards by itself: the answer still arrives, not a reset.
	if status, _, e := send(t, uploadRequest(t, p, strings.Repeat("too long ", 1<<17))); status != http.StatusBadRequest || e.Code != "EntityTooLarge" {
		t.Fatalf("presigned, too large: %d %+v", status, e)
	}
	// A body of unknown length goes chunked; S3 wants a Content-Length for PutObject.
	req := uploadRequest(t, p, "")
	req.Body = io.NopCloser(strings.NewReader("short"))
	req.ContentLength = -1
	if status, _, e := send(t, req); status != http.StatusLengthRequired || e.Code != "MissingContentLength" {
		t.Fatalf("chunked: %d %+v", status, e)
	}
	if got := keys(srv.Objects("logs")); len(got) != 1 || got[0] != "fits" {
		t.Fatalf("stored %v", got)
	}
}

// Above 2 MiB the SDK asks with Expect: 100-continue before it sends a body; the server
// answers a body it will take with 100 Continue, and refuses one it will not before reading it.
func TestLargeObjects(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 3<<16) // 3 MiB
	srv := start(t, locals3.Options{})
	c := srv.Client()
	put(t, c, "logs", "big", big)
	if _, body := get(t, c, "logs", "big", func(in *s3.GetObjectInput) { in.Range = aws.String("bytes=3145720-") }); body != "89abcdef" {
		t.Fatalf("tail %q", body)
	}

	small := start(t, locals3.Options{MaxObjectSize: 1 << 20})
	_, err := small.Client(noRetry).PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String("big"), Body: strings.NewReader(big)})
	wantRefusal(t, err, "EntityTooLarge", http.StatusBadRequest)
}

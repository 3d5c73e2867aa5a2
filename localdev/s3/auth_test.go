package s3_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	locals3 "mediator/localdev/s3"
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

const presignedKey = "runs/r1/steps/s1/000001"

// presignPut is what the API hands a node: a presigned PUT for logs/<presignedKey> that binds
// the Content-Type, from the real presigner.
func presignPut(t *testing.T, srv *locals3.Server, expires time.Duration, optFns ...func(*s3.Options)) *v4.PresignedHTTPRequest {
	t.Helper()
	p, err := srv.PresignClient(optFns...).PresignPutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String("logs"), Key: aws.String(presignedKey), ContentType: aws.String("text/plain"),
	}, s3.WithPresignExpires(expires))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// uploadRequest is what a node sends with a presigned PUT: net/http, the URL as given, the
// headers it was signed with, the body.
func uploadRequest(t *testing.T, p *v4.PresignedHTTPRequest, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(p.Method, p.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range p.SignedHeader {
		if !strings.EqualFold(name, "Host") {
			req.Header[name] = values
		}
	}
	return req
}

func TestPresignedPutAndGet(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	p := presignPut(t, srv, 15*time.Minute)
	u, _ := url.Parse(p.URL)
	if q := u.Query(); q.Get("X-Amz-Expires") != "900" || q.Get("X-Amz-SignedHeaders") != "content-type;host" || u.Path != "/logs/"+presignedKey {
		t.Fatalf("presigned URL %s", p.URL)
	}
	if status, body, _ := send(t, uploadRequest(t, p, "line 1\nline 2\n")); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	body, info, ok := srv.Object("logs", presignedKey)
	if !ok || string(body) != "line 1\nline 2\n" || info.ContentType != "text/plain" || info.ETag != quotedMD5(string(body)) {
		t.Fatalf("stored %q %+v", body, info)
	}
	// The same URL may be used again until it expires, replacing the object, as in S3.
	if status, _, _ := send(t, uploadRequest(t, p, "again")); status != http.StatusOK {
		t.Fatalf("second upload: %d", status)
	}

	g, err := srv.PresignClient().PresignGetObject(context.Background(), &s3.GetObjectInput{
		Bucket: aws.String("logs"), Key: aws.String(presignedKey), ResponseContentDisposition: aws.String(`attachment; filename="s1.log"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Disposition") != `attachment; filename="s1.log"` || resp.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("presigned get: %d %v", resp.StatusCode, resp.Header)
	}
	req, _ := http.NewRequest(http.MethodGet, g.URL, nil)
	req.Header.Set("Range", "bytes=2-")
	if status, body, _ := send(t, req); status != http.StatusPartialContent || string(body) != "ain" {
		t.Fatalf("presigned get of a range: %d %q", status, body)
	}
}

// Every way a presigned PUT can be misused is refused with S3's answer, and stores nothing.
func TestPresignedPutRefusals(t *testing.T) {
	t.Parallel()
	const expiry = time.Minute
	cases := []struct {
		name    string
		presign []func(*s3.Options)
		edit    func(*http.Request, *clock)
		status  int
		code    string
		message string // a part of S3's message, when it tells cases apart
	}{
		{name: "another key", edit: func(r *http.Request, _ *clock) { r.URL.Path = "/logs/runs/r1/steps/s2/000001"; r.URL.RawPath = "" },
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "another bucket", edit: func(r *http.Request, _ *clock) { r.URL.Path = "/other/" + presignedKey; r.URL.RawPath = "" },
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "another method", edit: func(r *http.Request, _ *clock) { r.Method = http.MethodDelete },
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "a longer life", edit: func(r *http.Request, _ *clock) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "X-Amz-Expires=60", "X-Amz-Expires=604800", 1)
		}, status: 403, code: "SignatureDoesNotMatch"},
		{name: "an added parameter", edit: func(r *http.Request, _ *clock) { r.URL.RawQuery += "&x-id=GetObject" },
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "a forged signature", edit: func(r *http.Request, _ *clock) {
			q := r.URL.Query()
			sig := []byte(q.Get("X-Amz-Signature"))
			sig[0] = "01"[boolIndex(sig[0] == '0')]
			q.Set("X-Amz-Signature", string(sig))
			r.URL.RawQuery = q.Encode()
		}, status: 403, code: "SignatureDoesNotMatch"},
		{name: "another content type", edit: func(r *http.Request, _ *clock) { r.Header.Set("Content-Type", "text/html") },
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "an unsigned x-amz header", edit: func(r *http.Request, _ *clock) { r.Header.Set("X-Amz-Meta-Owner", "mallory") },
			status: 403, code: "AccessDenied", message: "not signed"},
		{name: "after it expired", edit: func(_ *http.Request, c *clock) { c.Advance(expiry + time.Second) },
			status: 403, code: "AccessDenied", message: "Request has expired"},
		{name: "before it is valid", edit: func(_ *http.Request, c *clock) { c.Advance(-20 * time.Minute) },
			status: 403, code: "AccessDenied", message: "Request is not yet valid"},
		{name: "signed by an unknown key", presign: []func(*s3.Options){withCredentials("AKIDOTHER", locals3.DefaultSecretAccessKey, "")},
			status: 403, code: "InvalidAccessKeyId"},
		{name: "signed with another secret", presign: []func(*s3.Options){withCredentials(locals3.DefaultAccessKeyID, "NOT-THE-SECRET", "")},
			status: 403, code: "SignatureDoesNotMatch"},
		{name: "signed for another region", presign: []func(*s3.Options){func(o *s3.Options) { o.Region = "eu-west-1" }},
			status: 400, code: "AuthorizationQueryParametersError", message: "region 'eu-west-1' is wrong"},
		{name: "without its signature", edit: func(r *http.Request, _ *clock) {
			q := r.URL.Query()
			q.Del("X-Amz-Signature")
			r.URL.RawQuery = q.Encode()
		}, status: 400, code: "AuthorizationQueryParametersError"},
		{name: "with an Authorization header too", edit: func(r *http.Request, _ *clock) { r.Header.Set("Authorization", "AWS4-HMAC-SHA256 x") },
			status: 400, code: "InvalidArgument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			srv := start(t, locals3.Options{Now: clk.Now, Buckets: []string{"logs", "other"}})
			req := uploadRequest(t, presignPut(t, srv, expiry, tc.presign...), "a node's log")
			if tc.edit != nil {
				tc.edit(req, clk)
			}
			status, _, e := send(t, req)
			if status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("%d %s %q, want %d %s %q", status, e.Code, e.Message, tc.status, tc.code, tc.message)
			}
			if tc.code == "AccessDenied" && tc.message == "not signed" && e.HeadersNotSigned != "x-amz-meta-owner" {
				t.Fatalf("HeadersNotSigned %q", e.HeadersNotSigned)
			}
			for _, b := range []string{"logs", "other"} {
				if objs := srv.Objects(b); len(objs) != 0 {
					t.Fatalf("a refused upload stored %v", keys(objs))
				}
			}
			if srv.Refused()[tc.code] != 1 {
				t.Fatalf("refusals counted %v", srv.Refused())
			}
		})
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A presigned URL is good through its last second.
func TestPresignedPutAtItsLastSecond(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := start(t, locals3.Options{Now: clk.Now})
	p := presignPut(t, srv, time.Minute)
	clk.Advance(time.Minute - time.Second)
	if status, body, _ := send(t, uploadRequest(t, p, "in time")); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
}

func TestHeaderSignedRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	putTry := func(c *s3.Client) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("logs"), Key: aws.String("k"), Body: strings.NewReader("x")})
		return err
	}
	cases := []struct {
		name   string
		opts   []func(*s3.Options)
		skew   time.Duration // of the server's clock
		code   string
		status int
	}{
		{name: "a wrong secret", opts: []func(*s3.Options){withCredentials(locals3.DefaultAccessKeyID, "WRONG", "")}, code: "SignatureDoesNotMatch", status: 403},
		{name: "an unknown key", opts: []func(*s3.Options){withCredentials("AKIDOTHER", locals3.DefaultSecretAccessKey, "")}, code: "InvalidAccessKeyId", status: 403},
		{name: "an unexpected token", opts: []func(*s3.Options){withCredentials(locals3.DefaultAccessKeyID, locals3.DefaultSecretAccessKey, "TOKEN")}, code: "InvalidToken", status: 400},
		{name: "another region", opts: []func(*s3.Options){func(o *s3.Options) { o.Region = "eu-west-1" }}, code: "AuthorizationHeaderMalformed", status: 400},
		{name: "no signature at all", opts: []func(*s3.Options){func(o *s3.Options) { o.Credentials = aws.AnonymousCredentials{} }}, code: "AccessDenied", status: 403},
		{name: "a server clock ahead", skew: 16 * time.Minute, code: "RequestTimeTooSkewed", status: 403},
		{name: "a server clock behind", skew: -16 * time.Minute, code: "RequestTimeTooSkewed", status: 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			clk.Advance(tc.skew)
			srv := start(t, locals3.Options{Now: clk.Now})
			wantRefusal(t, putTry(srv.Client(append([]func(*s3.Options){noRetry}, tc.opts...)...)), tc.code, tc.status)
			if objs := srv.Objects("logs"); len(objs) != 0 {
				t.Fatalf("a refused put stored %v", keys(objs))
			}
		})
	}
	// S3's Date header is the server's clock: the SDK reads its skew there and signs again.
	t.Run("a skew the SDK corrects", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		clk.Advance(time.Hour)
		srv := start(t, locals3.Options{Now: clk.Now})
		if err := putTry(srv.Client()); err != nil {
			t.Fatal(err)
		}
		if srv.Refused()["RequestTimeTooSkewed"] != 1 || srv.Requests()["PutObject"] != 2 {
			t.Fatalf("refused %v of %v", srv.Refused(), srv.Requests())
		}
	})
	t.Run("a clock within the allowed skew", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		clk.Advance(14 * time.Minute)
		srv := start(t, locals3.Options{Now: clk.Now})
		if err := putTry(srv.Client(noRetry)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestHeaderSignedRequestsByHand(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{})
	empty := sha256Hex(nil)

	// A body swapped under a header-signed PUT: the signature holds, the payload hash does not.
	req := signedRequest(t, srv, http.MethodPut, "/logs/k", []byte("tampered"), sha256Hex([]byte("original")), time.Now(), locals3.DefaultSecretAccessKey)
	if status, _, e := send(t, req); status != 400 || e.Code != "XAmzContentSHA256Mismatch" {
		t.Fatalf("swapped body: %d %+v", status, e)
	}
	if len(srv.Objects("logs")) != 0 {
		t.Fatal("a swapped body was stored")
	}
	req = signedRequest(t, srv, http.MethodPut, "/logs/k", []byte("original"), sha256Hex([]byte("original")), time.Now(), locals3.DefaultSecretAccessKey)
	if status, body, _ := send(t, req); status != 200 {
		t.Fatalf("signed by hand: %d %s", status, body)
	}

	// X-Amz-Date in the past: a replay later than S3 allows.
	req = signedRequest(t, srv, http.MethodGet, "/logs/k", nil, empty, time.Now().Add(-16*time.Minute), locals3.DefaultSecretAccessKey)
	if status, _, e := send(t, req); status != 403 || e.Code != "RequestTimeTooSkewed" {
		t.Fatalf("old request: %d %+v", status, e)
	}
	// Headers added or changed after signing.
	req = signedRequest(t, srv, http.MethodGet, "/logs/k", nil, empty, time.Now(), locals3.DefaultSecretAccessKey)
	req.Header.Set("Range", "bytes=0-0")
	if status, body, e := send(t, req); status != http.StatusPartialContent || string(body) != "o" {
		t.Fatalf("an unsigned Range (not x-amz-*, so allowed): %d %+v", status, e)
	}
	req = signedRequest(t, srv, http.MethodGet, "/logs/k", nil, empty, time.Now(), locals3.DefaultSecretAccessKey)
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if status, _, e := send(t, req); status != 403 || e.Code != "SignatureDoesNotMatch" {
		t.Fatalf("a signed header changed after signing: %d %+v", status, e)
	}
	// Signature Version 2 is not spoken.
	req, _ = http.NewRequest(http.MethodGet, srv.URL()+"/logs/k", nil)
	req.Header.Set("Authorization", "AWS AKID:frJIUN8DYpKDtOLCwo//yllqDzg=")
	if status, _, e := send(t, req); status != 400 || e.Code != "InvalidRequest" {
		t.Fatalf("SigV2: %d %+v", status, e)
	}
	// Neither header nor query: anonymous.
	req, _ = http.NewRequest(http.MethodGet, srv.URL()+"/logs/k", nil)
	if status, _, e := send(t, req); status != 403 || e.Code != "AccessDenied" {
		t.Fatalf("anonymous: %d %+v", status, e)
	}
	// Without x-amz-content-sha256, which S3 requires of header-signed requests.
	req, _ = http.NewRequest(http.MethodGet, srv.URL()+"/logs/k", nil)
	_ = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: locals3.DefaultAccessKeyID, SecretAccessKey: locals3.DefaultSecretAccessKey},
		req, empty, "s3", srv.Region(), time.Now())
	if status, _, e := send(t, req); status != 400 || e.Code != "InvalidRequest" {
		t.Fatalf("no x-amz-content-sha256: %d %+v", status, e)
	}
}

func TestSessionToken(t *testing.T) {
	t.Parallel()
	srv := start(t, locals3.Options{SessionToken: "TOKEN"})
	put(t, srv.Client(), "logs", "k", "with the token")
	p, err := srv.PresignClient().PresignGetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("logs"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.URL, "X-Amz-Security-Token=TOKEN") {
		t.Fatalf("no token in %s", p.URL)
	}
	req, _ := http.NewRequest(http.MethodGet, p.URL, nil)
	if status, body, _ := send(t, req); status != 200 || string(body) != "with the token" {
		t.Fatalf("presigned with a token: %d %q", status, body)
	}
	_, err = srv.Client(noRetry, withCredentials(locals3.DefaultAccessKeyID, locals3.DefaultSecretAccessKey, "")).
		ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String("logs")})
	wantRefusal(t, err, "InvalidAccessKeyId", 403)
	_, err = srv.Client(noRetry, withCredentials(locals3.DefaultAccessKeyID, locals3.DefaultSecretAccessKey, "OTHER")).
		ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String("logs")})
	wantRefusal(t, err, "InvalidToken", 400)
}

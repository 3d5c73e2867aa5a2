package client_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mediator/shared/client"
)

const (
	accessKey    = "AKIDEXAMPLE"
	secretKey    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	sessionToken = "session-token-example"
	apiHost      = "abc123.execute-api.eu-west-1.amazonaws.com"
)

// awsEnvironment gives the default credential chain static keys through the environment, and
// nothing else to find.
func awsEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	t.Setenv("AWS_SESSION_TOKEN", sessionToken)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
}

// verifier is API Gateway's IAM check, written out from the SigV4 specification rather than
// taken from the SDK the client signs with: it recomputes the signature from the request as
// received — the region from the host it was sent to, the service execute-api, and the SHA-256
// of the body bytes that arrived, whatever hash header came with them.
type verifier struct {
	mu       sync.Mutex
	seen     []string // each attempt's Authorization
	failures []error
	// busy answers this many verified requests 503 before answering.
	busy int
}

func (v *verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	err := verifySigV4(r, body)
	v.mu.Lock()
	v.seen = append(v.seen, r.Header.Get("Authorization"))
	v.failures = append(v.failures, err)
	busy := v.busy > 0
	if err == nil && busy {
		v.busy--
	}
	v.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case err != nil:
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"message":%q}`, err.Error())
	case busy:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"message":"Service Unavailable"}`)
	case r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"run":{"run_id":"r1","state":"RUNNING"}}`)
	default:
		_, _ = io.WriteString(w, `{"status":"ok","run":{"run_id":"a:b","state":"QUEUED"}}`)
	}
}

func verifySigV4(r *http.Request, body []byte) error {
	const algorithm = "AWS4-HMAC-SHA256"
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), algorithm+" ")
	if !ok {
		return errors.New("not a SigV4 Authorization")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[0] != accessKey || scope[4] != "aws4_request" {
		return fmt.Errorf("credential %q", fields["Credential"])
	}
	amzDate := r.Header.Get("X-Amz-Date")
	region := strings.Split(r.Host, ".")[2] // <api-id>.execute-api.<region>.amazonaws.com
	if len(amzDate) < 8 || scope[1] != amzDate[:8] || scope[2] != region || scope[3] != "execute-api" {
		return fmt.Errorf("scope %v for %s at %s", scope[1:4], r.Host, amzDate)
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	for _, must := range []string{"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"} {
		if !slices.Contains(signed, must) {
			return fmt.Errorf("%s is not signed", must)
		}
	}
	if r.Header.Get("X-Amz-Security-Token") != sessionToken {
		return errors.New("the session token is missing")
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	var headers strings.Builder
	for _, name := range signed {
		var value string
		switch name {
		case "host":
			value = r.Host
		case "content-length":
			value = strconv.FormatInt(r.ContentLength, 10)
		case "x-amz-content-sha256":
			value = payload // what arrived, not what the client says it sent
		default:
			value = strings.Join(strings.Fields(strings.Join(r.Header.Values(name), ",")), " ")
		}
		headers.WriteString(name + ":" + value + "\n")
	}
	canonical := strings.Join([]string{r.Method, uriEncode(r.URL.EscapedPath(), false), canonicalQuery(r.URL.Query()),
		headers.String(), fields["SignedHeaders"], payload}, "\n")
	hashed := sha256.Sum256([]byte(canonical))
	toSign := strings.Join([]string{algorithm, amzDate, strings.Join(scope[1:], "/"), hex.EncodeToString(hashed[:])}, "\n")
	key := []byte("AWS4" + secretKey)
	for _, part := range scope[1:] {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return errors.New("the signature does not match the request as received")
	}
	return nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// uriEncode is SigV4's encoding: every byte but the unreserved ones, '/' kept in a path.
func uriEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !encodeSlash) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k, true)+"="+uriEncode(v, true))
		}
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "&")
}

// toward routes every connection to the test server, whatever host the URL names.
func toward(srv *httptest.Server, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	addr := srv.Listener.Addr().String()
	var rt http.RoundTripper = &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	if wrap != nil {
		rt = wrap(rt)
	}
	return &http.Client{Transport: rt}
}

// middlebox changes every request body on the way, keeping its length; with rehash it also
// rewrites X-Amz-Content-Sha256 to match what it sends.
type middlebox struct {
	next   http.RoundTripper
	rehash bool
}

func (m middlebox) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		b = bytes.Replace(b, []byte("rpi4"), []byte("rpi5"), 1)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		if m.rehash {
			sum := sha256.Sum256(b)
			req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		}
	}
	return m.next.RoundTrip(req)
}

func sigv4Client(t *testing.T, srv *httptest.Server, wrap func(http.RoundTripper) http.RoundTripper, clock func() time.Time) *client.Client {
	t.Helper()
	signer, err := client.NewSigV4(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	signer.Now = clock
	c, err := client.New("http://"+apiHost, client.WithAuth(signer), client.WithHTTPClient(toward(srv, wrap)),
		client.WithRetry(client.Retry{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var run = client.RunRequest{RunID: "r1", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{{ID: "s", Spec: map[string]any{"cmd": "make test"}}}}

// A signed request verifies: with a body and without, with a path that SigV4 encodes twice
// (a ':' in the run id) and a query string, and every retry is signed again.
func TestSigV4SignsWhatIsSent(t *testing.T) {
	awsEnvironment(t)
	v := &verifier{busy: 1}
	srv := httptest.NewServer(v)
	defer srv.Close()
	tick := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); tick = tick.Add(time.Second); return tick }
	c := sigv4Client(t, srv, nil, clock)
	ctx := context.Background()

	s, err := c.Submit(ctx, run) // answered 503 once, then 201
	if err != nil || !s.Placed() {
		t.Fatalf("submit: %v", err)
	}
	if _, err := c.GetRun(ctx, "a:b"); err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, err := c.ListRuns(ctx, client.ListRunsParams{State: "QUEUED", Limit: 5, After: "x y"}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("healthz: %v", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.seen) != 5 {
		t.Fatalf("%d requests, want 5 (the submit twice)", len(v.seen))
	}
	for i, err := range v.failures {
		if err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
	if v.seen[0] == v.seen[1] {
		t.Fatal("the retry was sent with the first attempt's signature: it was not signed again")
	}
}

// A body changed on the way is refused: the signature covers the hash of the bytes signed, and
// the server hashes the bytes it got — also when the middlebox fixes the hash header up.
func TestSigV4RefusesATamperedBody(t *testing.T) {
	awsEnvironment(t)
	for _, rehash := range []bool{false, true} {
		v := &verifier{}
		srv := httptest.NewServer(v)
		c := sigv4Client(t, srv, func(next http.RoundTripper) http.RoundTripper { return middlebox{next, rehash} }, nil)
		_, err := c.Submit(context.Background(), run)
		srv.Close()
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusForbidden || !strings.Contains(e.Detail, "signature does not match") {
			t.Fatalf("rehash %v: got %v, want 403 for the signature", rehash, err)
		}
	}
}

// The region comes from the host; a host that names none (a custom domain) takes the one given.
func TestSigV4Region(t *testing.T) {
	for host, want := range map[string]string{
		"abc123.execute-api.eu-west-1.amazonaws.com":                "eu-west-1",
		"abc123.execute-api.cn-north-1.amazonaws.com.cn":            "cn-north-1",
		"abc123-vpce-0a1b.execute-api.us-east-2.vpce.amazonaws.com": "us-east-2",
		"api.example.com":       "",
		"execute-api.localhost": "",
	} {
		if got := client.RegionOf(host); got != want {
			t.Errorf("RegionOf(%s) = %q, want %q", host, got, want)
		}
	}
	awsEnvironment(t)
	signer, err := client.NewSigV4(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "https://api.example.com/healthz", nil)
	if err := signer.Authorize(context.Background(), req, nil); err == nil {
		t.Fatal("signed for a host that names no region, with none given")
	}
	signer.Region = "ap-south-1"
	if err := signer.Authorize(context.Background(), req, nil); err != nil || !strings.Contains(req.Header.Get("Authorization"), "/ap-south-1/execute-api/aws4_request") {
		t.Fatalf("override: %v %s", err, req.Header.Get("Authorization"))
	}
}

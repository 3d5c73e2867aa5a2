package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tokenEndpoint stands in for an OAuth 2.0 issuer: it checks the client's credentials, issues
// opaque tokens tok-1, tok-2, … that live expiresIn seconds (0: no expires_in), and answers
// the statuses a test queues before it issues again.
type tokenEndpoint struct {
	srv       *httptest.Server
	expiresIn int
	issued    atomic.Int32
	mu        sync.Mutex
	failures  []int // statuses to answer, in order, before issuing
}

func newTokenEndpoint(t *testing.T, expiresIn int) *tokenEndpoint {
	t.Helper()
	e := &tokenEndpoint{expiresIn: expiresIn}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || !ok || id != "ci" || secret != "s3cret" ||
			r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != "mediator/client" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_client"}`)
			return
		}
		e.mu.Lock()
		var status int
		if len(e.failures) > 0 {
			status, e.failures = e.failures[0], e.failures[1:]
		}
		e.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		answer := map[string]any{"access_token": fmt.Sprintf("tok-%d", e.issued.Add(1)), "token_type": "Bearer"}
		if e.expiresIn > 0 {
			answer["expires_in"] = e.expiresIn
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *tokenEndpoint) fail(statuses ...int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failures = append(e.failures, statuses...)
}

func (e *tokenEndpoint) credentials() *ClientCredentials {
	return NewClientCredentials(clientcredentials.Config{
		ClientID: "ci", ClientSecret: "s3cret", TokenURL: e.srv.URL, Scopes: []string{"mediator/client"},
		AuthStyle: oauth2.AuthStyleInHeader,
	}, nil)
}

// api stands in for Mediator's API: GET /v1/queue answers 200 to the tokens it accepts and 401
// (API Gateway's body) to any other, and records the token of every request.
type api struct {
	srv      *httptest.Server
	mu       sync.Mutex
	accepted map[string]bool
	seen     []string
}

func newAPI(t *testing.T, accepted ...string) *api {
	t.Helper()
	a := &api{accepted: map[string]bool{}}
	a.accept(accepted...)
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		a.mu.Lock()
		a.seen = append(a.seen, token)
		ok := a.accepted[token]
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"message":"Unauthorized"}`)
			return
		}
		_, _ = io.WriteString(w, `{"shapes":[]}`)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *api) accept(tokens ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tok := range tokens {
		a.accepted[tok] = true
	}
}

func (a *api) refuse(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.accepted, token)
}

func (a *api) tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// A token the API stops accepting before its expiry: the call that is refused fetches one new
// token and is sent again once, at once, and succeeds; the calls after it use the new token
// without fetching.
func TestA401FetchesAFreshTokenAndRetriesOnce(t *testing.T) {
	t.Parallel()
	issuer := newTokenEndpoint(t, 3600)
	a := newAPI(t, "tok-1", "tok-2")
	creds := issuer.credentials()
	c, w := newTestClient(t, a.srv.URL, WithAuth(creds))
	ctx := context.Background()
	if _, err := c.Queue(ctx); err != nil {
		t.Fatal(err)
	}
	a.refuse("tok-1")
	if _, err := c.Queue(ctx); err != nil {
		t.Fatalf("the call after the token was refused: %v", err)
	}
	if _, err := c.Queue(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(a.tokens(), " "), "tok-1 tok-1 tok-2 tok-2"; got != want {
		t.Fatalf("the API saw %q, want %q", got, want)
	}
	if n := issuer.issued.Load(); n != 2 || creds.Fetches() != 2 {
		t.Fatalf("%d tokens issued, %d fetched: want 2", n, creds.Fetches())
	}
	if len(w.got) != 0 {
		t.Fatalf("the renewed send waited %v: it goes at once", w.got)
	}
}

// An API that refuses every token: each call is sent twice — the second time with a fresh
// token, which the next call starts with — and then answers the 401, never looping.
func TestA401IsRetriedOnlyOncePerCall(t *testing.T) {
	t.Parallel()
	issuer := newTokenEndpoint(t, 3600)
	a := newAPI(t)
	c, _ := newTestClient(t, a.srv.URL, WithAuth(issuer.credentials()))
	for call := 1; call <= 2; call++ {
		_, err := c.Queue(context.Background())
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Attempts != 2 || e.Detail != "Unauthorized" {
			t.Fatalf("call %d: %v (%+v), want the 401 after 2 attempts", call, err, e)
		}
	}
	if got, want := strings.Join(a.tokens(), " "), "tok-1 tok-2 tok-2 tok-3"; got != want {
		t.Fatalf("the API saw %q, want %q", got, want)
	}
}

// A static bearer token has nothing to renew: a 401 is the answer, sent once.
func TestA401WithAStaticTokenIsNotRetried(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	c, _ := newTestClient(t, a.srv.URL, WithToken("static"))
	_, err := c.Queue(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Attempts != 1 {
		t.Fatalf("%v, want the 401 after one attempt", err)
	}
	if len(a.tokens()) != 1 {
		t.Fatalf("sent %d times", len(a.tokens()))
	}
}

// A call allowed one attempt is not sent again after a 401 either.
func TestOneAttemptIsNotRenewed(t *testing.T) {
	t.Parallel()
	issuer := newTokenEndpoint(t, 3600)
	a := newAPI(t)
	c, _ := newTestClient(t, a.srv.URL, WithAuth(issuer.credentials()), WithRetry(Retry{Attempts: 1}))
	if _, err := c.Queue(context.Background()); err == nil || len(a.tokens()) != 1 {
		t.Fatalf("%v after %d sends, want the 401 after one", err, len(a.tokens()))
	}
}

// A token is reused until it is near its expiry — 10 s before, or a quarter of its life when
// that is shorter — and the request after that fetches a new one.
func TestATokenIsRenewedBeforeItExpires(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lifetime   int           // expires_in
		reusedTill time.Duration // still reused this long after it was issued
		renewedBy  time.Duration // renewed by then
	}{
		{3600, 3589 * time.Second, 3591 * time.Second},
		{40, 29 * time.Second, 31 * time.Second},
		{5, 3500 * time.Millisecond, 4 * time.Second},
	} {
		t.Run(fmt.Sprint(tc.lifetime), func(t *testing.T) {
			t.Parallel()
			issuer := newTokenEndpoint(t, tc.lifetime)
			a := newAPI(t, "tok-1", "tok-2")
			creds := issuer.credentials()
			var offset atomic.Int64
			creds.now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			c, _ := newTestClient(t, a.srv.URL, WithAuth(creds))
			for _, at := range []time.Duration{0, tc.reusedTill, tc.renewedBy} {
				offset.Store(int64(at))
				if _, err := c.Queue(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := strings.Join(a.tokens(), " "), "tok-1 tok-1 tok-2"; got != want {
				t.Fatalf("the API saw %q, want %q", got, want)
			}
		})
	}
}

// A token without expires_in is kept until the API refuses it.
func TestATokenWithoutExpiryIsKeptUntilRefused(t *testing.T) {
	t.Parallel()
	issuer := newTokenEndpoint(t, 0)
	a := newAPI(t, "tok-1", "tok-2")
	c, _ := newTestClient(t, a.srv.URL, WithAuth(issuer.credentials()))
	for range 3 {
		if _, err := c.Queue(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	a.refuse("tok-1")
	if _, err := c.Queue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(a.tokens(), " "), "tok-1 tok-1 tok-1 tok-1 tok-2"; got != want {
		t.Fatalf("the API saw %q, want %q", got, want)
	}
}

// Renew drops only the token still held: a request refused with a token replaced since does
// not throw the new one away.
func TestRenewKeepsATokenFetchedSince(t *testing.T) {
	t.Parallel()
	issuer := newTokenEndpoint(t, 3600)
	creds := issuer.credentials()
	ctx := context.Background()
	first := httptest.NewRequest("GET", "/", nil)
	if err := creds.Authorize(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	creds.Renew(first)
	second := httptest.NewRequest("GET", "/", nil)
	if err := creds.Authorize(ctx, second, nil); err != nil {
		t.Fatal(err)
	}
	creds.Renew(first) // refused late, with tok-1
	third := httptest.NewRequest("GET", "/", nil)
	if err := creds.Authorize(ctx, third, nil); err != nil {
		t.Fatal(err)
	}
	if got := []string{first.Header.Get("Authorization"), second.Header.Get("Authorization"), third.Header.Get("Authorization")}; strings.Join(got, ",") != "Bearer tok-1,Bearer tok-2,Bearer tok-2" {
		t.Fatalf("sent %v", got)
	}
}

// A token endpoint that answers 503 is retried as the API would be; one that refuses the
// client's credentials ends the call at once, the API never called.
func TestTokenEndpointFailures(t *testing.T) {
	t.Parallel()
	t.Run("unavailable", func(t *testing.T) {
		t.Parallel()
		issuer := newTokenEndpoint(t, 3600)
		issuer.fail(http.StatusServiceUnavailable)
		a := newAPI(t, "tok-1")
		c, w := newTestClient(t, a.srv.URL, WithAuth(issuer.credentials()))
		if _, err := c.Queue(context.Background()); err != nil {
			t.Fatalf("after one 503 from the token endpoint: %v", err)
		}
		if len(w.got) != 1 || len(a.tokens()) != 1 {
			t.Fatalf("waits %v, sends %d: want one wait and one send", w.got, len(a.tokens()))
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		issuer := newTokenEndpoint(t, 3600)
		a := newAPI(t)
		creds := NewClientCredentials(clientcredentials.Config{
			ClientID: "ci", ClientSecret: "wrong", TokenURL: issuer.srv.URL, AuthStyle: oauth2.AuthStyleInHeader,
		}, nil)
		c, w := newTestClient(t, a.srv.URL, WithAuth(creds))
		_, err := c.Queue(context.Background())
		var re *oauth2.RetrieveError
		if !errors.As(err, &re) || re.ErrorCode != "invalid_client" || !strings.Contains(err.Error(), issuer.srv.URL) {
			t.Fatalf("%v, want the token endpoint's invalid_client naming it", err)
		}
		if len(w.got) != 0 || len(a.tokens()) != 0 {
			t.Fatalf("waits %v, sends %d: a refusal is not retried", w.got, len(a.tokens()))
		}
	})
}

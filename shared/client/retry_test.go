package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waits replaces the client's sleeping between attempts with a record of the waits asked for:
// the tests see the backoff without taking it, and assert no timing.
type waits struct {
	mu  sync.Mutex
	got []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.got = append(w.got, d)
	w.mu.Unlock()
	return ctx.Err()
}

func newTestClient(t *testing.T, url string, opts ...Option) (*Client, *waits) {
	t.Helper()
	c, err := New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	c.wait = w.wait
	return c, w
}

func unavailable(w http.ResponseWriter, retryAfter string) {
	w.Header().Set("Content-Type", "application/problem+json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"type":"/problems/unavailable","title":"The service is temporarily unavailable; try again","status":503,"code":"unavailable","request_id":"r1"}`)
}

// A 503 is retried, never sooner than its Retry-After, until the attempts are spent; the
// caller then gets the last answer, decoded, with how many attempts it took.
func TestA503IsRetriedUntilTheAttemptsAreSpent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		unavailable(w, "1")
	}))
	defer srv.Close()
	c, w := newTestClient(t, srv.URL, WithRetry(Retry{Attempts: 4, Budget: time.Hour, BaseDelay: 100 * time.Millisecond, MaxDelay: 800 * time.Millisecond}))
	_, err := c.GetRun(context.Background(), "r")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error", err)
	}
	if e.Status != 503 || e.Code != "unavailable" || e.Attempts != 4 || e.RetryAfter != time.Second || e.RequestID != "r1" {
		t.Fatalf("got %+v", e)
	}
	if !Unavailable(err) {
		t.Fatal("a 503 after the retries is not Unavailable")
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}
	if len(w.got) != 3 {
		t.Fatalf("waits %v, want 3", w.got)
	}
	for _, d := range w.got {
		// The jitter is at most 800ms here: the wait is Retry-After's.
		if d != time.Second {
			t.Fatalf("waits %v: each must be Retry-After's 1s", w.got)
		}
	}
}

// Without Retry-After, the waits are full jitter under a ceiling that doubles from BaseDelay
// up to MaxDelay.
func TestBackoffIsFullJitterUnderADoublingCeiling(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		unavailable(w, "")
	}))
	defer srv.Close()
	r := Retry{Attempts: 6, Budget: time.Hour, BaseDelay: 100 * time.Millisecond, MaxDelay: 500 * time.Millisecond}
	c, w := newTestClient(t, srv.URL, WithRetry(r))
	if _, err := c.Queue(context.Background()); err == nil {
		t.Fatal("no error")
	}
	ceilings := []time.Duration{100, 200, 400, 500, 500}
	if calls.Load() != 6 || len(w.got) != 5 {
		t.Fatalf("%d calls, waits %v", calls.Load(), w.got)
	}
	for i, d := range w.got {
		if d < 0 || d > ceilings[i]*time.Millisecond {
			t.Fatalf("wait %d is %s, over its ceiling %dms", i+1, d, ceilings[i])
		}
	}
	// The ceiling grows: many draws for retry n reach past retry n-1's ceiling.
	for n := 2; n <= 3; n++ {
		var most time.Duration
		for range 2000 {
			most = max(most, r.backoff(n))
		}
		if most <= r.BaseDelay<<(n-2) || most > r.BaseDelay<<(n-1) {
			t.Fatalf("retry %d: the longest of 2000 waits is %s", n, most)
		}
	}
}

// The time budget: a wait that would end past it is not started, and the last answer is
// returned at once.
func TestNoWaitPastTheBudget(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		unavailable(w, "30")
	}))
	defer srv.Close()
	c, w := newTestClient(t, srv.URL, WithRetry(Retry{Attempts: 10, Budget: 10 * time.Second}))
	_, err := c.ListNodes(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != 503 || e.RetryAfter != 30*time.Second {
		t.Fatalf("got %v", err)
	}
	if calls.Load() != 1 || len(w.got) != 0 {
		t.Fatalf("%d calls, waits %v: want one call and no wait", calls.Load(), w.got)
	}
}

// 429 and a dropped connection are retried too; a 400 or a 500 (a bug, not a hiccup) is not.
func TestWhatIsRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failures  int // answered badly before a 200
		answer    func(w http.ResponseWriter)
		wantCalls int32
		wantErr   int // the status of the error, 0 for success
	}{
		{"429", 2, func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }, 3, 0},
		{"dropped connection", 2, drop, 3, 0},
		{"502 from API Gateway", 1, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		}, 2, 0},
		{"400", 1, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"type":"/problems/invalid_request","status":400,"code":"invalid_request","errors":[{"path":"limit","message":"must be a whole number"}]}`)
		}, 1, 400},
		{"500", 1, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"type":"/problems/internal","status":500,"code":"internal"}`)
		}, 1, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if int(calls.Add(1)) <= tc.failures {
					tc.answer(w)
					return
				}
				_, _ = io.WriteString(w, `{"nodes":[]}`)
			}))
			defer srv.Close()
			c, _ := newTestClient(t, srv.URL)
			_, err := c.ListNodes(context.Background())
			var e *Error
			switch {
			case tc.wantErr == 0 && err != nil:
				t.Fatalf("got %v", err)
			case tc.wantErr != 0 && (!errors.As(err, &e) || e.Status != tc.wantErr):
				t.Fatalf("got %v, want a %d", err, tc.wantErr)
			}
			if n := calls.Load(); n != tc.wantCalls {
				t.Fatalf("%d calls, want %d", n, tc.wantCalls)
			}
		})
	}
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// A connection that never answers: every attempt times out, and the caller gets a
// TransportError saying how many attempts were made.
func TestAnAttemptThatHangsTimesOutAndIsRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, _ := newTestClient(t, srv.URL, WithTimeout(20*time.Millisecond), WithRetry(Retry{Attempts: 3}))
	_, err := c.ListLeases(context.Background())
	var te *TransportError
	if !errors.As(err, &te) || te.Attempts != 3 || !Unavailable(err) {
		t.Fatalf("got %v, want a TransportError after 3 attempts", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d calls", calls.Load())
	}
}

// The caller's context ends the retrying at once, and the error says so.
func TestTheCallersContextStopsTheRetries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { unavailable(w, "1") }))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := newTestClient(t, srv.URL)
	c.wait = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := c.Health(ctx)
	if !errors.Is(err, context.Canceled) || Unavailable(err) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestRetryAfterAsADate(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}
	if d, ok := retryAfter(h, now); !ok || d != 3*time.Second {
		t.Fatalf("got %s %v", d, ok)
	}
	if _, ok := retryAfter(http.Header{"Retry-After": {"soon"}}, now); ok {
		t.Fatal("read a Retry-After that is neither seconds nor a date")
	}
}

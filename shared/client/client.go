// Package client is a typed Go client of Mediator's HTTP API: one method per route, the
// answers decoded into this package's types with the body as received kept beside them, and
// every non-success answer an *Error (RFC 9457 problems decoded field by field).
//
// Every call is retried on 503, 429, 502, 504 and on network errors, with exponential backoff
// and full jitter, honouring Retry-After, within a budget of attempts and time (Retry). That is
// safe for every route because the API makes each one idempotent: a submit is keyed by its
// run_id (the same request again answers 200 with the run as it stands), a step report by its
// lease's epoch, a heartbeat and a cancel are states rather than increments, and reads are reads.
//
// A request is authorized afresh on every attempt (Auth): a bearer token, an access token of
// the OAuth 2.0 client-credentials grant (renewed before it expires, and once more when the API
// answers 401), or an AWS SigV4 signature over the exact bytes sent, for API Gateway's IAM
// authorizer.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Client calls one Mediator API. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	http      *http.Client
	auth      Auth
	timeout   time.Duration
	retry     Retry
	userAgent string
	owner     string // ForOwner's
	// wait sleeps between attempts; tests replace it to see the waits without taking them.
	wait func(context.Context, time.Duration) error
}

// Retry bounds how one call is retried. Zero fields take DefaultRetry's.
type Retry struct {
	// Attempts is the most times one call is sent (1: never retried), the one send again with
	// renewed credentials after a 401 included.
	Attempts int
	// Budget is the most time one call may take, every attempt and wait included: no attempt
	// runs past it, and no wait is started that would end past it.
	Budget time.Duration
	// The wait before retry n is uniformly random in [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)] (full
	// jitter, so clients that failed together do not come back together), and never shorter
	// than the answer's Retry-After.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRetry rides over what the API calls transient — a lock held elsewhere, a database
// restarting, a Lambda cold start throttled — which it answers within its 8 s request
// deadline with Retry-After: 1. Six attempts, their waits growing to 5 s, take about ten
// seconds of waiting before giving up; 45 s bounds one call even when every attempt hangs.
var DefaultRetry = Retry{Attempts: 6, Budget: 45 * time.Second, BaseDelay: 250 * time.Millisecond, MaxDelay: 5 * time.Second}

// DefaultTimeout bounds one attempt: longer than a function's 10 s timeout, so a slow answer
// is waited for rather than cut and sent again.
const DefaultTimeout = 15 * time.Second

// maxAnswer bounds what is read of one answer.
const maxAnswer = 64 << 20

// Option configures a Client.
type Option func(*Client)

// WithToken authorizes every request with a bearer token.
func WithToken(token string) Option { return WithAuth(Bearer(token)) }

// WithAuth authorizes every request with a.
func WithAuth(a Auth) Option { return func(c *Client) { c.auth = a } }

// WithHTTPClient sends the requests through h (its transport, proxies, TLS settings). Its own
// Timeout, if any, applies to each attempt besides the client's.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout bounds each attempt (DefaultTimeout when not given).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetry sets the retry budget; zero fields keep DefaultRetry's.
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.Attempts > 0 {
			c.retry.Attempts = r.Attempts
		}
		if r.Budget > 0 {
			c.retry.Budget = r.Budget
		}
		if r.BaseDelay > 0 {
			c.retry.BaseDelay = r.BaseDelay
		}
		if r.MaxDelay > 0 {
			c.retry.MaxDelay = r.MaxDelay
		}
	}
}

// WithUserAgent names the caller in the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New is a client of the API at base ("http://127.0.0.1:3000",
// "https://abc123.execute-api.eu-west-1.amazonaws.com").
func New(base string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: the API URL %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: the API URL %q must be http:// or https:// and name a host", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: the API URL %q must not carry a query or a fragment", base)
	}
	c := &Client{base: u, http: http.DefaultClient, auth: Bearer(""), timeout: DefaultTimeout,
		retry: DefaultRetry, userAgent: "mediator-client", wait: sleep}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Base is the API's URL.
func (c *Client) Base() string { return c.base.String() }

// Auth is how the client authorizes its calls: the agent signs its push connection with the
// same credentials when they are SigV4's.
func (c *Client) Auth() Auth { return c.auth }

// call is one API call: what to send, and which statuses answer it (any other is an *Error).
type call struct {
	method string
	path   string // escaped
	query  url.Values
	body   []byte // nil: no body
	accept []int  // the statuses that answer it
}

// replied lets do fill the Reply each answer type embeds.
type replied interface{ setReply(Reply) }

func (r *Reply) setReply(x Reply) { *r = x }

// do sends a call, retrying what is transient within the budget, and decodes an accepted
// answer into out.
func (c *Client) do(ctx context.Context, k call, out replied) error {
	start := time.Now()
	var deadline time.Time
	if c.retry.Budget > 0 {
		deadline = start.Add(c.retry.Budget)
	}
	target := *c.base
	target.Path = strings.TrimRight(c.base.Path, "/") + mustUnescape(k.path)
	target.RawPath = strings.TrimRight(c.base.EscapedPath(), "/") + k.path
	if len(k.query) > 0 {
		target.RawQuery = k.query.Encode()
	}
	u := target.String()
	var last error
	renewer, _ := c.auth.(Renewer)
	renewed := false
	for attempt := 1; ; attempt++ {
		resp, data, err := c.attempt(ctx, k, u, deadline)
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w", k.method, k.path, ctx.Err())
		}
		var wait time.Duration
		switch {
		case err != nil:
			var fatal *permanentError
			if errors.As(err, &fatal) {
				return fmt.Errorf("%s %s: %w", k.method, k.path, fatal.err)
			}
			// An attempt cut short by the budget's end says only that; the one before it says
			// why the API could not be reached (refused, reset), which is what a person needs.
			var prev *TransportError
			if errors.Is(err, context.DeadlineExceeded) && errors.As(last, &prev) && !errors.Is(prev.Err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (the attempt before: %v)", err, prev.Err)
			}
			last = &TransportError{Method: k.method, URL: u, Attempts: attempt, Elapsed: time.Since(start), Err: err}
		case accepted(resp.StatusCode, k.accept):
			reply := Reply{Status: resp.StatusCode, Body: data, Header: resp.Header}
			if err := json.Unmarshal(data, out); err != nil {
				e := decodeError(k.method, k.path, resp, data)
				e.Detail, e.Attempts = "the answer is not the JSON this client expects: "+err.Error(), attempt
				return e
			}
			out.setReply(reply)
			return nil
		default:
			e := decodeError(k.method, k.path, resp, data)
			e.Attempts = attempt
			if resp.StatusCode == http.StatusUnauthorized && renewer != nil && !renewed && attempt < c.retry.Attempts {
				// The token was refused before its expiry (revoked, or the key that signed it
				// rotated): a fresh one may be accepted. Once per call, and at once — a 401 is
				// not load, and waiting would not change it.
				renewed = true
				renewer.Renew(resp.Request)
				continue
			}
			if !retryable(resp.StatusCode) {
				return e
			}
			last, wait = e, e.RetryAfter
		}
		if attempt >= c.retry.Attempts {
			return last
		}
		wait = max(wait, c.retry.backoff(attempt))
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return last
		}
		if err := c.wait(ctx, wait); err != nil {
			return fmt.Errorf("%s %s: %w (the last attempt: %v)", k.method, k.path, err, last)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// permanentError is a failure no retry can mend: a bad certificate, credentials that cannot
// be had, a request that cannot be built.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// attempt sends the call once, bounded by the attempt timeout and the call's deadline, and
// reads the whole answer.
func (c *Client) attempt(ctx context.Context, k call, u string, deadline time.Time) (*http.Response, []byte, error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if !deadline.IsZero() {
		var cancelBudget context.CancelFunc
		actx, cancelBudget = context.WithDeadline(actx, deadline)
		defer cancelBudget()
	}
	var body io.Reader
	if k.body != nil {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(actx, k.method, u, body)
	if err != nil {
		return nil, nil, &permanentError{err}
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if k.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if err := c.auth.Authorize(actx, req, k.body); err != nil {
		err = fmt.Errorf("authorizing the request: %w", err)
		var transient *transientAuthError
		if errors.As(err, &transient) {
			return nil, nil, err
		}
		return nil, nil, &permanentError{err}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if permanent(err) {
			return nil, nil, &permanentError{err}
		}
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	return resp, data, nil
}

// permanent: errors of the connection no retry changes — the server's certificate is not
// trusted, or it does not speak TLS.
func permanent(err error) bool {
	var cert *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	return errors.As(err, &cert) || errors.As(err, &record)
}

// retryable statuses: the API's own 503 (transient by definition), throttling (429), and API
// Gateway's answers for a function that failed or timed out (502, 504), after which the
// request may or may not have been applied — which every route makes safe to repeat.
func retryable(status int) bool {
	switch status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func accepted(status int, accept []int) bool { return slices.Contains(accept, status) }

// backoff is the full-jitter wait before retry n (n ≥ 1).
func (r Retry) backoff(n int) time.Duration {
	ceiling := r.MaxDelay
	if shift := n - 1; shift < 30 && r.BaseDelay<<shift < ceiling && r.BaseDelay<<shift > 0 {
		ceiling = r.BaseDelay << shift
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}

// retryAfter reads Retry-After, in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func mustUnescape(p string) string {
	s, err := url.PathUnescape(p)
	if err != nil {
		return p
	}
	return s
}

package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Renewer is an Auth whose credentials can go stale before they expire — a token the server
// stopped accepting, a key it rotated — and be renewed. When an answer is 401, the client tells
// it which request was refused and sends the call once more at once (Client.do): once, so a
// server that refuses every token costs two sends, never a loop.
type Renewer interface {
	Auth
	// Renew drops the credentials req carried if they are still the ones in use, so that the
	// next Authorize fetches fresh ones. Calls refused together with the same token drop it
	// once: a token fetched since is kept.
	Renew(req *http.Request)
}

// ClientCredentials authorizes requests with access tokens of the OAuth 2.0 client-credentials
// grant (RFC 6749 §4.4), fetched from the token endpoint by golang.org/x/oauth2/clientcredentials
// and sent as bearer tokens: a CI job's or a service's credentials, for API Gateway's JWT
// authorizer.
//
// One token serves every request until it is near its expiry, then the next request fetches
// another (renewEarly); concurrent requests wait for one fetch rather than each making their
// own. A token without expires_in serves until the API refuses it (Renew).
type ClientCredentials struct {
	config clientcredentials.Config
	// http carries the token requests; nil is oauth2's default (http.DefaultClient).
	http *http.Client
	// now is the clock that decides when a token is renewed; tests move it.
	now func() time.Time

	mu      sync.Mutex // held across a fetch: one fetch for every request waiting on it
	token   *oauth2.Token
	renewAt time.Time // zero: until refused
	fetches atomic.Int64
}

// NewClientCredentials fetches tokens with cfg (ClientID, ClientSecret, TokenURL, Scopes;
// AuthStyle zero tries client_secret_basic, then client_secret_post). h carries the token
// requests; nil is http.DefaultClient.
func NewClientCredentials(cfg clientcredentials.Config, h *http.Client) *ClientCredentials {
	return &ClientCredentials{config: cfg, http: h, now: time.Now}
}

// Fetches is how many tokens have been fetched.
func (c *ClientCredentials) Fetches() int64 { return c.fetches.Load() }

// Authorize sets "Authorization: Bearer <access token>", fetching a token first when there is
// none or the one held is near its expiry.
func (c *ClientCredentials) Authorize(ctx context.Context, req *http.Request, _ []byte) error {
	tok, err := c.current(ctx)
	if err != nil {
		return err
	}
	tok.SetAuthHeader(req)
	return nil
}

// Renew drops the token req carried if it is still the one held.
func (c *ClientCredentials) Renew(req *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != nil && req != nil && req.Header.Get("Authorization") == c.token.Type()+" "+c.token.AccessToken {
		c.token = nil
	}
}

func (c *ClientCredentials) current(ctx context.Context) (*oauth2.Token, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != nil && (c.renewAt.IsZero() || c.now().Before(c.renewAt)) {
		return c.token, nil
	}
	if c.http != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, c.http)
	}
	asked := c.now()
	tok, err := c.config.Token(ctx)
	if err != nil {
		return nil, tokenError(c.config.TokenURL, err)
	}
	if tok.AccessToken == "" {
		return nil, fmt.Errorf("the token endpoint %s answered no access_token", c.config.TokenURL)
	}
	c.fetches.Add(1)
	c.token, c.renewAt = tok, time.Time{}
	if !tok.Expiry.IsZero() {
		c.renewAt = tok.Expiry.Add(-renewEarly(tok.Expiry.Sub(asked)))
	}
	return tok, nil
}

// renewEarly is how long before its expiry a token of this lifetime is renewed: oauth2's own
// margin of 10 s, or a quarter of a shorter token's life. A fixed 10 s would renew a token of
// 10 s or less on every request — make dev's DEV_TOKEN_SECONDS=5 — and a margin of nothing
// would send tokens that expire on the way, each costing a 401 and a second send.
func renewEarly(lifetime time.Duration) time.Duration {
	return min(10*time.Second, max(lifetime/4, 0))
}

// tokenError says what the token endpoint did. An endpoint that cannot be reached, or that
// answered 5xx or 429, is transient (the call is retried as an unreachable API is); a refusal
// (invalid_client, invalid_scope) is not, and ends the call.
func tokenError(tokenURL string, err error) error {
	err = fmt.Errorf("fetching a token from %s: %w", tokenURL, err)
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.Response != nil && (re.Response.StatusCode >= 500 || re.Response.StatusCode == http.StatusTooManyRequests) {
			return &transientAuthError{err}
		}
		return err
	}
	if permanent(err) || errors.Is(err, context.Canceled) {
		return err
	}
	return &transientAuthError{err}
}

// transientAuthError is credentials that could not be had this time but may be on the next
// attempt: Client.attempt retries it rather than ending the call.
type transientAuthError struct{ err error }

func (e *transientAuthError) Error() string { return e.err.Error() }
func (e *transientAuthError) Unwrap() error { return e.err }

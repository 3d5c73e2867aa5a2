// Package issuer is a local OAuth 2.0 authorization server for `make dev AUTH=jwt`: the
// client-credentials grant (RFC 6749 §4.4) at a token endpoint, the authorization code grant
// with PKCE for the web console's people (people.go), the signing key at a JWKS endpoint, and
// discovery documents (OpenID Connect Discovery, RFC 8414) that point to them —
// what API Gateway's JWT authorizer reads from a Cognito user pool. Its access tokens are real
// JWTs (RS256, a key generated at each start) with the claims of Cognito's access tokens, so
// the local gateway validates them as API Gateway would, and shared/auth reads them as it reads
// Cognito's.
package issuer

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"mediator/shared/auth"
)

// Client is a client the issuer knows: its id, its secret, and the scopes it may be given.
type Client struct {
	ID     string
	Secret string
	Scopes []string
}

// DevClients are make dev's clients, with fixed secrets like the development bearer tokens so
// that the README's session replays as written. They exist only here; nothing deployed knows
// them.
func DevClients() []Client {
	return []Client{
		{ID: "dev-ci", Secret: "dev-ci-secret", Scopes: []string{auth.ScopeClient}},
		{ID: "dev-ops", Secret: "dev-ops-secret", Scopes: []string{auth.ScopeAdmin}},
	}
}

// Paths of the endpoints under the issuer's URL, where a Cognito user pool's domain and issuer
// keep them.
const (
	TokenPath     = "/oauth2/token"
	JWKSPath      = "/.well-known/jwks.json"
	OpenIDPath    = "/.well-known/openid-configuration"
	OAuthMetaPath = "/.well-known/oauth-authorization-server"
)

// DefaultLifetime is an access token's life when Options leave it zero: DEV_TOKEN_SECONDS'
// default.
const DefaultLifetime = 300 * time.Second

// Options configure an issuer.
type Options struct {
	Clients []Client
	// People may sign in at the authorization endpoint (DevPeople when nil), for the console.
	People   []Person
	Lifetime time.Duration // each access token's; zero is DefaultLifetime
}

// Issuer is a running local authorization server.
type Issuer struct {
	url      string
	clients  map[string]Client
	lifetime time.Duration
	key      *rsa.PrivateKey
	kid      string
	srv      *http.Server
	ln       net.Listener

	people []Person

	mu     sync.Mutex
	issued map[string]int   // by client id
	codes  map[string]grant // the authorization codes not yet traded
}

// Start listens on addr (127.0.0.1:0 for a free port) and serves until Close. Its URL,
// http://<addr>, is the tokens' iss.
func Start(addr string, o Options) (*Issuer, error) {
	if o.Lifetime == 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Lifetime < time.Second {
		return nil, fmt.Errorf("issuer: a token's lifetime must be at least a second, not %s", o.Lifetime)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if o.People == nil {
		o.People = DevPeople()
	}
	i := &Issuer{clients: map[string]Client{}, lifetime: o.Lifetime, key: key, kid: thumbprint(&key.PublicKey),
		issued: map[string]int{}, codes: map[string]grant{}, people: o.People}
	for _, c := range o.Clients {
		if c.ID == "" || c.Secret == "" {
			return nil, errors.New("issuer: every client needs an id and a secret")
		}
		i.clients[c.ID] = c
	}
	if i.ln, err = net.Listen("tcp", addr); err != nil {
		return nil, err
	}
	i.url = "http://" + i.ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+TokenPath, i.token)
	mux.HandleFunc("GET "+AuthorizePath, i.authorize)
	mux.HandleFunc("POST "+AuthorizePath, i.authorize)
	mux.HandleFunc("GET "+JWKSPath, i.jwks)
	mux.HandleFunc("GET "+OpenIDPath, i.discovery)
	mux.HandleFunc("GET "+OAuthMetaPath, i.discovery)
	i.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = i.srv.Serve(i.ln) }()
	return i, nil
}

// Close stops serving.
func (i *Issuer) Close() error { return i.srv.Close() }

// URL is the issuer identifier, the tokens' iss, and the base of its endpoints.
func (i *Issuer) URL() string { return i.url }

// TokenURL is the token endpoint: what `mediator --token-url` takes.
func (i *Issuer) TokenURL() string { return i.url + TokenPath }

// Lifetime is each access token's life.
func (i *Issuer) Lifetime() time.Duration { return i.lifetime }

// ClientIDs are the clients' ids, the console's public client's among them: the audience a gateway in front of these clients accepts, as
// a stack's JwtAudience lists its Cognito app clients.
func (i *Issuer) ClientIDs() []string {
	ids := []string{ConsoleClient}
	for id := range i.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Issued is how many access tokens the token endpoint has issued to clientID.
func (i *Issuer) Issued(clientID string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.issued[clientID]
}

// Sign signs claims as they are with the issuer's key, under its kid: the tokens the token
// endpoint would not issue (an ID token, an expired one, a foreign issuer's), for tests.
func (i *Issuer) Sign(claims jwt.MapClaims) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = i.kid
	return t.SignedString(i.key)
}

// AccessClaims are the claims of an access token for client with scopes, issued at now: those
// of a Cognito access token of the client-credentials grant (iss, sub and client_id the
// client, token_use "access", scope space-separated, no aud), with nbf and jti.
func (i *Issuer) AccessClaims(clientID string, scopes []string, now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss":       i.url,
		"sub":       clientID,
		"client_id": clientID,
		"token_use": "access",
		"scope":     strings.Join(scopes, " "),
		"iat":       now.Unix(),
		"nbf":       now.Unix(),
		"exp":       now.Add(i.lifetime).Unix(),
		"jti":       uuid.NewString(),
	}
}

// token is the token endpoint: grant_type=client_credentials, the client authenticated by
// HTTP Basic (client_secret_basic) or in the form (client_secret_post), never both (RFC 6749
// §2.3), an optional scope that must be within the client's (none asks for all of them, as
// Cognito gives), and RFC 6749 §5 answers.
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "the body must be application/x-www-form-urlencoded")
		return
	}
	form := r.PostForm
	if form.Get("grant_type") == "authorization_code" {
		i.tradeCode(w, r)
		return
	}
	id, secret, basic := r.BasicAuth()
	if basic {
		// RFC 6749 §2.3.1: the id and secret are form-encoded before they are base64-encoded.
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			oauthError(w, http.StatusBadRequest, "invalid_request", "the Basic credentials are not form-encoded")
			return
		}
		if form.Has("client_secret") {
			oauthError(w, http.StatusBadRequest, "invalid_request", "authenticate by one method: Basic or client_secret, not both")
			return
		}
		if form.Has("client_id") && form.Get("client_id") != id {
			oauthError(w, http.StatusBadRequest, "invalid_request", "client_id differs from the Basic credentials")
			return
		}
	} else {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	client, ok := i.clients[id]
	// Compared in constant time, whatever the id: the time does not say which secret is near.
	known := subtle.ConstantTimeCompare(digest(secret), digest(client.Secret)) == 1
	if !ok || !known || secret == "" {
		if basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="mediator-local"`)
		}
		oauthError(w, http.StatusUnauthorized, "invalid_client", "unknown client or wrong secret")
		return
	}
	switch form.Get("grant_type") {
	case "client_credentials":
	case "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "grant_type is missing")
		return
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "only client_credentials is served to a client with a secret")
		return
	}
	scopes := client.Scopes
	if asked := strings.Fields(form.Get("scope")); len(asked) > 0 {
		for _, s := range asked {
			if !slices.Contains(client.Scopes, s) {
				oauthError(w, http.StatusBadRequest, "invalid_scope", fmt.Sprintf("%s may not have scope %q", id, s))
				return
			}
		}
		scopes = asked
	}
	signed, err := i.Sign(i.AccessClaims(id, scopes, time.Now()))
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", "signing the token")
		return
	}
	i.mu.Lock()
	i.issued[id]++
	i.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": signed, "token_type": "Bearer", "expires_in": int(i.lifetime / time.Second), "scope": strings.Join(scopes, " "),
	})
}

func digest(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// jwks is the public key as a JSON Web Key Set (RFC 7517), under the kid every token names.
func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := &i.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": i.kid,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

// discovery is the metadata API Gateway reads to find the keys (jwks_uri, under the issuer it
// was configured with) and a client reads to find the token endpoint, and the authorization
// endpoint the console's sign-in sends a browser to.
func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	scopes := []string{}
	for _, c := range i.clients {
		for _, s := range c.Scopes {
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	slices.Sort(scopes)
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                i.url,
		"token_endpoint":                        i.TokenURL(),
		"authorization_endpoint":                i.AuthorizeURL(),
		"jwks_uri":                              i.url + JWKSPath,
		"grant_types_supported":                 []string{"client_credentials", "authorization_code"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "none"},
		"code_challenge_methods_supported":      []string{"S256"},
		"scopes_supported":                      scopes,
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
	})
}

// thumbprint is the key's RFC 7638 thumbprint: a kid that changes with the key, so a token
// signed by a key of an earlier start names a kid the JWKS no longer has.
func thumbprint(pub *rsa.PublicKey) string {
	e := base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes())
	n := base64.RawURLEncoding.EncodeToString(pub.N.Bytes())
	sum := sha256.Sum256([]byte(`{"e":"` + e + `","kty":"RSA","n":"` + n + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func oauthError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

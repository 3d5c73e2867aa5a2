package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2/clientcredentials"

	"mediator/localdev/apitest"
	"mediator/localdev/gateway"
	"mediator/localdev/issuer"
	"mediator/shared/auth"
)

// startIssuer is make dev's issuer, with its clients, on a free loopback port.
func startIssuer(t *testing.T) *issuer.Issuer {
	t.Helper()
	iss, err := issuer.Start("127.0.0.1:0", issuer.Options{Clients: issuer.DevClients()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Close() })
	return iss
}

func authorizerOf(iss *issuer.Issuer) *gateway.JWTAuthorizer {
	return &gateway.JWTAuthorizer{Issuer: iss.URL(), Audience: iss.ClientIDs()}
}

func sign(t *testing.T, iss *issuer.Issuer, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := iss.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// with is claims with some changed; a nil value removes the claim.
func with(claims jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range claims {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// The function behind a JWT route gets the token's claims as API Gateway renders them —
// every value a string, numbers as written, lists in brackets — and its scopes, and no
// principal of the development tokens'.
func TestTheJWTAuthorizerContextIsAPIGateways(t *testing.T) {
	t.Parallel()
	iss := startIssuer(t)
	gw, got := capture(t)
	gw.JWT = authorizerOf(iss)
	now := time.Now()
	claims := with(iss.AccessClaims("dev-ci", []string{auth.ScopeClient, "extra/read"}, now),
		"cognito:groups", []string{"ops", "admins"}, "flag", true, "nested", map[string]any{"a": 1}, "ratio", 1.5)
	req := httptest.NewRequest("GET", "/v1/queue", nil)
	req.Header.Set("Authorization", "Bearer "+sign(t, iss, claims))
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, req)
	if rec.Code != 202 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	a := got.RequestContext.Authorizer
	if a == nil || a.JWT == nil || a.Lambda != nil || a.IAM != nil {
		t.Fatalf("authorizer %+v, want JWT claims alone", a)
	}
	want := map[string]string{
		"iss": iss.URL(), "sub": "dev-ci", "client_id": "dev-ci", "token_use": "access",
		"scope": "mediator/client extra/read", "exp": strconv.FormatInt(now.Add(issuer.DefaultLifetime).Unix(), 10),
		"iat": strconv.FormatInt(now.Unix(), 10), "cognito:groups": "[ops admins]", "flag": "true",
		"nested": `{"a":1}`, "ratio": "1.5",
	}
	for k, v := range want {
		if a.JWT.Claims[k] != v {
			t.Errorf("claim %s = %q, want %q", k, a.JWT.Claims[k], v)
		}
	}
	if strings.Join(a.JWT.Scopes, " ") != "mediator/client extra/read" {
		t.Errorf("scopes %v", a.JWT.Scopes)
	}
}

// A stack of the test's own in JWT mode: the real handlers on PostgreSQL behind the gateway,
// the people's routes behind the issuer's JWTs, the nodes' behind the development tokens.
type jwtStack struct {
	t    *testing.T
	base string
	iss  *issuer.Issuer
}

func serveJWT(t *testing.T) *jwtStack {
	t.Helper()
	iss := startIssuer(t)
	return &jwtStack{t: t, base: apitest.New(t).ServeJWT(authorizerOf(iss)), iss: iss}
}

type answer struct {
	status    int
	body      string
	challenge string
	problem   string // the problem's code, when the handler answered one
}

func (s *jwtStack) call(method, path, token, body string) answer {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: strings.TrimSpace(string(b)), challenge: resp.Header.Get("www-authenticate")}
	if resp.Header.Get("content-type") == "application/problem+json" {
		var p struct{ Type string }
		_ = json.Unmarshal(b, &p)
		a.problem = p.Type[strings.LastIndexByte(p.Type, '/')+1:]
	}
	return a
}

// clientToken is an access token for client, from the token endpoint.
func (s *jwtStack) clientToken(id string) string {
	s.t.Helper()
	var secret string
	for _, c := range issuer.DevClients() {
		if c.ID == id {
			secret = c.Secret
		}
	}
	tok, err := (&clientcredentials.Config{ClientID: id, ClientSecret: secret, TokenURL: s.iss.TokenURL()}).Token(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok.AccessToken
}

const (
	gatewayUnauthorized = `{"message":"Unauthorized"}`
	gatewayForbidden    = `{"message":"Forbidden"}`
)

// What the local gateway in JWT mode lets through to the handlers, and what it refuses itself
// with API Gateway's answers: every case through the real handlers on PostgreSQL.
func TestTheGatewayAuthorizesJWTsAsAPIGateway(t *testing.T) {
	t.Parallel()
	s := serveJWT(t)
	now := time.Now()
	access := s.iss.AccessClaims("dev-ci", []string{auth.ScopeClient}, now)
	run := `{"run_id":"r1","needs":["board=x"],"steps":[{"id":"s"}]}`

	// The clients' tokens from the token endpoint: dev-ci is a client, dev-ops an admin.
	if a := s.call("POST", "/v1/runs", s.clientToken("dev-ci"), run); a.status != 422 {
		t.Fatalf("dev-ci submits: %+v (no node could serve it: 422 from the handler)", a)
	}
	if a := s.call("GET", "/v1/runs/r1", s.clientToken("dev-ci"), ""); a.status != 200 {
		t.Fatalf("dev-ci reads its run: %+v", a)
	}
	if a := s.call("GET", "/v1/nodes", s.clientToken("dev-ops"), ""); a.status != 200 {
		t.Fatalf("dev-ops lists the fleet: %+v", a)
	}
	if a := s.call("GET", "/v1/nodes", s.clientToken("dev-ci"), ""); a.status != 403 || a.problem != "forbidden" {
		t.Fatalf("dev-ci lists the fleet: %+v, want the handler's 403", a)
	}

	// mediator_kind is no scope: a client's token that claims admin acts as the client it is.
	kind := with(access, "mediator_kind", "admin")
	if a := s.call("GET", "/v1/queue", sign(t, s.iss, kind), ""); a.status != 200 {
		t.Errorf("mediator_kind admin, scope client, on a client's route: %+v", a)
	}
	if a := s.call("GET", "/v1/nodes", sign(t, s.iss, kind), ""); a.status != 403 || a.problem != "forbidden" {
		t.Errorf("mediator_kind admin, scope client, on an admin's route: %+v, want the handler's 403", a)
	}

	// The gateway's own refusals, before any function runs.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	kid := func() string {
		tok, _, err := jwt.NewParser().ParseUnverified(sign(t, s.iss, access), jwt.MapClaims{})
		if err != nil {
			t.Fatal(err)
		}
		return tok.Header["kid"].(string)
	}()
	foreignKey := jwt.NewWithClaims(jwt.SigningMethodRS256, access)
	foreignKey.Header["kid"] = kid
	signedElsewhere, _ := foreignKey.SignedString(other)
	hmac := jwt.NewWithClaims(jwt.SigningMethodHS256, access)
	hmac.Header["kid"] = kid
	symmetric, _ := hmac.SignedString([]byte("a shared secret"))
	elsewhere := startIssuer(t)
	otherIssuers, _ := elsewhere.Sign(access) // its own key, its own kid, this issuer's iss
	for _, tc := range []struct {
		name, token, want string
		status            int
	}{
		{"no token", "", gatewayUnauthorized, 401},
		{"a development token", "dev-client", gatewayUnauthorized, 401},
		{"not a JWT", "a.b.c", gatewayUnauthorized, 401},
		{"expired", sign(t, s.iss, with(access, "iat", now.Add(-time.Hour).Unix(), "nbf", now.Add(-time.Hour).Unix(), "exp", now.Add(-time.Second).Unix())), gatewayUnauthorized, 401},
		{"no exp", sign(t, s.iss, with(access, "exp", nil)), gatewayUnauthorized, 401},
		{"not yet valid", sign(t, s.iss, with(access, "nbf", now.Add(time.Minute).Unix())), gatewayUnauthorized, 401},
		{"issued in the future", sign(t, s.iss, with(access, "iat", now.Add(time.Minute).Unix())), gatewayUnauthorized, 401},
		{"signed by another key under the issuer's kid", signedElsewhere, gatewayUnauthorized, 401},
		{"signed by another issuer's key", otherIssuers, gatewayUnauthorized, 401},
		{"HS256 under the issuer's kid", symmetric, gatewayUnauthorized, 401},
		{"another issuer", sign(t, s.iss, with(access, "iss", elsewhere.URL())), gatewayUnauthorized, 401},
		{"no issuer", sign(t, s.iss, with(access, "iss", nil)), gatewayUnauthorized, 401},
		{"another audience", sign(t, s.iss, with(access, "aud", "someone-else")), gatewayUnauthorized, 401},
		{"aud decides, not client_id", sign(t, s.iss, with(access, "aud", []string{"someone-else"})), gatewayUnauthorized, 401},
		{"no aud and another client_id", sign(t, s.iss, with(access, "client_id", "someone-else")), gatewayUnauthorized, 401},
		{"no aud and no client_id", sign(t, s.iss, with(access, "client_id", nil)), gatewayUnauthorized, 401},
		{"no Mediator scope", sign(t, s.iss, with(access, "scope", "other/read")), gatewayForbidden, 403},
		{"no scope at all", sign(t, s.iss, with(access, "scope", nil)), gatewayForbidden, 403},
		{"the node scope", sign(t, s.iss, with(access, "scope", "mediator/node")), gatewayForbidden, 403},
	} {
		a := s.call("GET", "/v1/queue", tc.token, "")
		if a.status != tc.status || a.body != tc.want || a.problem != "" {
			t.Errorf("%s: %+v, want the gateway's %d %s", tc.name, a, tc.status, tc.want)
		}
		if wantErr := map[int]string{401: `error="invalid_token"`, 403: `error="insufficient_scope"`}[tc.status]; !strings.Contains(a.challenge, wantErr) {
			t.Errorf("%s: WWW-Authenticate %q, want %s", tc.name, a.challenge, wantErr)
		}
	}

	// What passes: an aud in the audience (client_id is then not read), scp instead of scope.
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"aud in the audience", sign(t, s.iss, with(access, "aud", []string{"dev-ci", "x"}, "client_id", "someone-else"))},
		{"scp as a list", sign(t, s.iss, with(access, "scope", nil, "scp", []string{auth.ScopeClient}))},
	} {
		if a := s.call("GET", "/v1/queue", tc.token, ""); a.status != 200 {
			t.Errorf("%s: %+v", tc.name, a)
		}
	}

	// The nodes' routes keep the development tokens, standing in for IAM; a JWT there names
	// no principal, and the handler answers 401.
	beat := `{"boot_id":"b1","labels":["board=x"]}`
	if a := s.call("PUT", "/v1/nodes/n1", "dev-node-n1", beat); a.status != 200 {
		t.Errorf("a node's heartbeat with its development token: %+v", a)
	}
	if a := s.call("PUT", "/v1/nodes/n1", s.clientToken("dev-ops"), beat); a.status != 401 || a.problem != "unauthenticated" {
		t.Errorf("a heartbeat with a JWT: %+v, want the handler's 401", a)
	}
	// The routes for anyone need nothing.
	if a := s.call("GET", "/healthz", "", ""); a.status != 200 {
		t.Errorf("/healthz: %+v", a)
	}
}

// API Gateway cannot tell an ID token from an access token: one with the route's scope and a
// valid audience (an ID token's aud is its client) passes the gateway and reaches the function,
// and shared/auth refuses it by its token_use: the answer is the handler's 401.
func TestAnIDTokenPassesTheGatewayAndTheHandlerRefusesIt(t *testing.T) {
	t.Parallel()
	s := serveJWT(t)
	id := with(s.iss.AccessClaims("dev-ci", []string{auth.ScopeClient}, time.Now()),
		"token_use", "id", "aud", "dev-ci", "client_id", nil, "email", "ci@example.com")
	if a := s.call("GET", "/v1/queue", sign(t, s.iss, id), ""); a.status != 401 || a.problem != "unauthenticated" {
		t.Fatalf("an ID token: %+v, want the handler's 401", a)
	}
}

// The gateway reads the issuer's keys again when a token names a kid it has not seen: an
// issuer restarted on its address with a new key (make dev again) is followed, and the tokens
// of its earlier key are refused.
func TestTheGatewayFollowsAnIssuerThatRestarted(t *testing.T) {
	t.Parallel()
	first := startIssuer(t)
	gw, _ := capture(t)
	gw.JWT = authorizerOf(first)
	status := func(token string) int {
		t.Helper()
		req := httptest.NewRequest("GET", "/v1/queue", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		return rec.Code
	}
	old := sign(t, first, first.AccessClaims("dev-ci", []string{auth.ScopeClient}, time.Now()))
	if got := status(old); got != 202 {
		t.Fatalf("a token of the first key: %d", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := issuer.Start(strings.TrimPrefix(first.URL(), "http://"), issuer.Options{Clients: issuer.DevClients()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	if got := status(sign(t, second, second.AccessClaims("dev-ci", []string{auth.ScopeClient}, time.Now()))); got != 202 {
		t.Fatalf("a token of the new key: %d", got)
	}
	if got := status(old); got != 401 {
		t.Fatalf("a token of the earlier key: %d", got)
	}
}

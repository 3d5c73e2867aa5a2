package issuer_test

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"mediator/localdev/issuer"
)

func start(t *testing.T, lifetime time.Duration) *issuer.Issuer {
	t.Helper()
	iss, err := issuer.Start("127.0.0.1:0", issuer.Options{Clients: issuer.DevClients(), Lifetime: lifetime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Close() })
	return iss
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// discover finds the token endpoint and the keys as a client and API Gateway would: from the
// discovery documents under the issuer's URL, both of which say the same.
func discover(t *testing.T, iss *issuer.Issuer) (tokenURL string, keys map[string]*rsa.PublicKey) {
	t.Helper()
	type metadata struct {
		Issuer        string   `json:"issuer"`
		TokenEndpoint string   `json:"token_endpoint"`
		JWKSURI       string   `json:"jwks_uri"`
		Grants        []string `json:"grant_types_supported"`
		AuthMethods   []string `json:"token_endpoint_auth_methods_supported"`
	}
	var oidc, oauth metadata
	getJSON(t, iss.URL()+"/.well-known/openid-configuration", &oidc)
	getJSON(t, iss.URL()+"/.well-known/oauth-authorization-server", &oauth)
	if oidc.Issuer != iss.URL() || oidc.TokenEndpoint != iss.TokenURL() || strings.Join(oidc.Grants, ",") != "client_credentials,authorization_code" ||
		strings.Join(oidc.AuthMethods, ",") != "client_secret_basic,client_secret_post,none" {
		t.Fatalf("discovery: %+v", oidc)
	}
	if oauth.Issuer != oidc.Issuer || oauth.TokenEndpoint != oidc.TokenEndpoint || oauth.JWKSURI != oidc.JWKSURI {
		t.Fatalf("the two documents differ: %+v, %+v", oidc, oauth)
	}
	var set struct {
		Keys []struct{ Kty, Kid, Alg, Use, N, E string } `json:"keys"`
	}
	getJSON(t, oidc.JWKSURI, &set)
	keys = map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		n, _ := base64.RawURLEncoding.DecodeString(k.N)
		e, _ := base64.RawURLEncoding.DecodeString(k.E)
		if k.Kty != "RSA" || k.Alg != "RS256" || k.Use != "sig" || k.Kid == "" {
			t.Fatalf("a key: %+v", k)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	if len(keys) != 1 {
		t.Fatalf("%d keys, want the one the issuer signs with", len(keys))
	}
	return oidc.TokenEndpoint, keys
}

// verify checks a token's RS256 signature against the published keys and returns its claims.
func verify(t *testing.T, raw string, keys map[string]*rsa.PublicKey) jwt.MapClaims {
	t.Helper()
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(raw, claims, func(tok *jwt.Token) (any, error) {
		return keys[tok.Header["kid"].(string)], nil
	}, jwt.WithValidMethods([]string{"RS256"}))
	if err != nil || !tok.Valid {
		t.Fatalf("the token does not verify against the JWKS: %v", err)
	}
	return claims
}

// Both ways of authenticating a client get an access token: a JWT signed by the key the JWKS
// publishes, carrying a Cognito access token's claims, living the configured lifetime.
func TestTheTokenEndpointIssuesAccessTokens(t *testing.T) {
	t.Parallel()
	iss := start(t, 42*time.Second)
	tokenURL, keys := discover(t, iss)
	jtis := map[string]bool{}
	for _, tc := range []struct {
		name   string
		style  oauth2.AuthStyle
		client string
		secret string
		scopes []string
		want   string
	}{
		{"client_secret_basic", oauth2.AuthStyleInHeader, "dev-ci", "dev-ci-secret", nil, "mediator/client"},
		{"client_secret_post", oauth2.AuthStyleInParams, "dev-ops", "dev-ops-secret", []string{"mediator/admin"}, "mediator/admin"},
	} {
		cfg := clientcredentials.Config{ClientID: tc.client, ClientSecret: tc.secret, TokenURL: tokenURL, Scopes: tc.scopes, AuthStyle: tc.style}
		tok, err := cfg.Token(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tok.Type() != "Bearer" || time.Until(tok.Expiry) > 42*time.Second || time.Until(tok.Expiry) < 30*time.Second {
			t.Fatalf("%s: type %q, expiry in %s", tc.name, tok.Type(), time.Until(tok.Expiry))
		}
		c := verify(t, tok.AccessToken, keys)
		for claim, want := range map[string]string{
			"iss": iss.URL(), "sub": tc.client, "client_id": tc.client, "token_use": "access", "scope": tc.want,
		} {
			if c[claim] != want {
				t.Errorf("%s: %s = %v, want %q", tc.name, claim, c[claim], want)
			}
		}
		iat, _ := c.GetIssuedAt()
		nbf, _ := c.GetNotBefore()
		exp, _ := c.GetExpirationTime()
		if iat == nil || nbf == nil || exp == nil || !nbf.Equal(iat.Time) || exp.Sub(iat.Time) != 42*time.Second {
			t.Errorf("%s: iat %v nbf %v exp %v", tc.name, iat, nbf, exp)
		}
		if _, ok := c["aud"]; ok {
			t.Errorf("%s: aud %v: a Cognito access token has none, the gateway reads client_id", tc.name, c["aud"])
		}
		jti, _ := c["jti"].(string)
		if jti == "" || jtis[jti] {
			t.Errorf("%s: jti %q is not new", tc.name, jti)
		}
		jtis[jti] = true
	}
	if iss.Issued("dev-ci") != 1 || iss.Issued("dev-ops") != 1 {
		t.Fatalf("issued %d and %d, want 1 each", iss.Issued("dev-ci"), iss.Issued("dev-ops"))
	}
}

// What the token endpoint refuses, with RFC 6749 §5.2's errors, issuing nothing.
func TestTheTokenEndpointRefuses(t *testing.T) {
	t.Parallel()
	iss := start(t, 0)
	for _, tc := range []struct {
		name        string
		basic       []string // id, secret
		form        url.Values
		status      int
		code        string
		challenge   bool
		description string
	}{
		{"a wrong secret", []string{"dev-ci", "nope"}, url.Values{"grant_type": {"client_credentials"}}, 401, "invalid_client", true, ""},
		{"an unknown client", nil, url.Values{"grant_type": {"client_credentials"}, "client_id": {"who"}, "client_secret": {"x"}}, 401, "invalid_client", false, ""},
		{"no secret", nil, url.Values{"grant_type": {"client_credentials"}, "client_id": {"dev-ci"}}, 401, "invalid_client", false, ""},
		{"two methods at once", []string{"dev-ci", "dev-ci-secret"}, url.Values{"grant_type": {"client_credentials"}, "client_secret": {"dev-ci-secret"}}, 400, "invalid_request", false, "one method"},
		{"another grant", []string{"dev-ci", "dev-ci-secret"}, url.Values{"grant_type": {"password"}}, 400, "unsupported_grant_type", false, ""},
		{"no grant", []string{"dev-ci", "dev-ci-secret"}, url.Values{}, 400, "invalid_request", false, "grant_type"},
		{"a scope the client may not have", []string{"dev-ci", "dev-ci-secret"}, url.Values{"grant_type": {"client_credentials"}, "scope": {"mediator/client mediator/admin"}}, 400, "invalid_scope", false, "mediator/admin"},
	} {
		req, err := http.NewRequest("POST", iss.TokenURL(), strings.NewReader(tc.form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.basic != nil {
			req.SetBasicAuth(tc.basic[0], tc.basic[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || body.Error != tc.code || !strings.Contains(body.Description, tc.description) {
			t.Errorf("%s: %d %+v, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
		if got := resp.Header.Get("WWW-Authenticate") != ""; got != tc.challenge {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if n := iss.Issued("dev-ci"); n != 0 {
		t.Fatalf("%d tokens issued", n)
	}
}

// Each start signs with a key of its own, under a kid of its own: a token of an earlier start
// names a key the JWKS of this one does not have.
func TestEachStartHasItsOwnKey(t *testing.T) {
	t.Parallel()
	_, a := discover(t, start(t, 0))
	_, b := discover(t, start(t, 0))
	for kid := range a {
		if b[kid] != nil {
			t.Fatalf("two starts share kid %s", kid)
		}
	}
}

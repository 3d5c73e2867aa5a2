package issuer_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"mediator/localdev/issuer"
)

// noRedirects is a client that shows the issuer's redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// signIn plays the sign-in page's form for person and answers the code it redirects with.
func signIn(t *testing.T, iss *issuer.Issuer, redirect, challenge, person string) string {
	t.Helper()
	form := url.Values{"response_type": {"code"}, "client_id": {issuer.ConsoleClient}, "redirect_uri": {redirect},
		"state": {"s1"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "person": {person}}
	resp, err := noRedirects.PostForm(iss.AuthorizeURL(), form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || !strings.HasPrefix(back.String(), redirect+"?") || back.Query().Get("state") != "s1" {
		t.Fatalf("sign-in answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	return back.Query().Get("code")
}

func trade(t *testing.T, iss *issuer.Issuer, code, redirect, verifier string) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(iss.TokenURL(), url.Values{"grant_type": {"authorization_code"}, "client_id": {issuer.ConsoleClient},
		"code": {code}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// The console's sign-in: a code for the person chosen, traded once, with the verifier of its
// challenge and the redirect it was given for, for an access token of that person; a code
// for another redirect or verifier, or used twice, gets nothing, and no redirect but a local
// console's callback is ever sent to.
func TestAPersonSignsInWithPKCE(t *testing.T) {
	t.Parallel()
	iss := start(t, 0)
	const redirect = "http://127.0.0.1:3000/console/callback"
	verifier := strings.Repeat("v", 43)
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])

	if status, body := trade(t, iss, signIn(t, iss, redirect, challenge, "dev-person"), redirect, strings.Repeat("w", 43)); status != 400 || body["error"] != "invalid_grant" {
		t.Fatalf("another verifier: %d %v", status, body)
	}
	if status, body := trade(t, iss, signIn(t, iss, redirect, challenge, "dev-person"), "http://127.0.0.1:3001/console/callback", verifier); status != 400 || body["error"] != "invalid_grant" {
		t.Fatalf("another redirect: %d %v", status, body)
	}
	code := signIn(t, iss, redirect, challenge, "dev-person")
	status, body := trade(t, iss, code, redirect, verifier)
	if status != 200 || body["scope"] != "openid mediator/client" {
		t.Fatalf("the code: %d %v", status, body)
	}
	_, keys := discover(t, iss)
	if claims := verify(t, body["access_token"].(string), keys); claims["sub"] != "dev-person" || claims["client_id"] != issuer.ConsoleClient || claims["token_use"] != "access" {
		t.Fatalf("claims %v", claims)
	}
	if status, _ := trade(t, iss, code, redirect, verifier); status != 400 {
		t.Fatalf("the code again: %d", status)
	}
	for _, bad := range []string{"https://evil.example/console/callback", "http://127.0.0.1:3000/elsewhere", "http://10.0.0.1/console/callback"} {
		resp, err := noRedirects.Get(iss.AuthorizeURL() + "?" + url.Values{"response_type": {"code"}, "client_id": {issuer.ConsoleClient},
			"redirect_uri": {bad}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
			t.Fatalf("redirect %s: %s, Location %q", bad, resp.Status, resp.Header.Get("Location"))
		}
	}
}

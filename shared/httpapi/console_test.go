package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/config"
)

// config.json tells the console how this stack signs people in, from the function's settings;
// with JWT the issuer's token endpoint joins the policy's connect-src (the console posts the
// code there), beside the API and the log bucket.
func TestConsoleConfigFollowsTheSignIn(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) {
		c.Console = config.Console{SignIn: "jwt", ClientID: "people", Scopes: "openid mediator/client",
			AuthorizeURL: "https://pool.auth.eu-west-1.amazoncognito.com/oauth2/authorize",
			TokenURL:     "https://pool.auth.eu-west-1.amazoncognito.com/oauth2/token"}
	}))
	resp := env.Do(apitest.Nobody, "GET", "/console/config.json", nil)
	var got map[string]string
	resp.Decode(t, &got)
	want := map[string]string{"sign_in": "jwt", "client_id": "people", "scopes": "openid mediator/client",
		"authorize_url": "https://pool.auth.eu-west-1.amazoncognito.com/oauth2/authorize",
		"token_url":     "https://pool.auth.eu-west-1.amazoncognito.com/oauth2/token"}
	if resp.Status != 200 || len(got) != len(want) {
		t.Fatalf("config.json: %s", resp)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("config.json %s = %q, want %q", k, got[k], v)
		}
	}
	csp := resp.Headers["content-security-policy"]
	if !strings.Contains(csp, "connect-src 'self' "+env.S3.URL()+" https://pool.auth.eu-west-1.amazoncognito.com;") {
		t.Fatalf("CSP: %s", csp)
	}

	// An IAM stack's console says it cannot sign in, and nothing about an issuer.
	iam := apitest.New(t, apitest.NoLogBucket(), apitest.Configure(func(c *config.Config) {
		c.Console = config.Console{SignIn: "iam", ClientID: "ignored", TokenURL: "https://elsewhere.example"}
	}))
	resp = iam.Do(apitest.Nobody, "GET", "/console/config.json", nil)
	if strings.TrimSpace(string(resp.Body)) != `{"sign_in":"iam"}` || !strings.Contains(resp.Headers["content-security-policy"], "connect-src 'self';") {
		t.Fatalf("an IAM stack's config.json: %s, CSP %s", resp, resp.Headers["content-security-policy"])
	}
}

// No path under /console/ reads anything but the console's own files: what is not one of them
// — a traversal, an absolute path, the embedding's own directory — is the app's page.
func TestConsolePagesStayInsideTheirFiles(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.NoLogBucket())
	index := env.Do(apitest.Nobody, "GET", "/console", nil)
	if index.Status != 200 || !strings.Contains(string(index.Body), "/console/app.js") {
		t.Fatalf("/console: %s", index)
	}
	for _, target := range []string{"/console/..%2fconsole.go", "/console/%2e%2e/%2e%2e/go.mod", "/console/static/index.html",
		"/console/.%2fapp.js", "/console/%2fetc%2fpasswd", "/console/app.js%00", "/console/runs/r1?code=c&state=s"} {
		// Straight to the handler: the contract's validator reads {proxy+} as one segment.
		ev, route := env.Event(apitest.Nobody, "GET", target, nil)
		resp, err := env.Functions[route.Function](context.Background(), ev)
		if err != nil || resp.StatusCode != 200 || resp.Body != string(index.Body) || resp.Headers["content-type"] != "text/html; charset=utf-8" {
			t.Errorf("GET %s: %d %s %v, not the app", target, resp.StatusCode, resp.Headers["content-type"], err)
		}
	}
	if js := env.Do(apitest.Nobody, "GET", "/console/app.js", nil); js.Status != 200 || js.Headers["content-type"] != "text/javascript; charset=utf-8" {
		t.Fatalf("app.js: %d %s", js.Status, js.Headers["content-type"])
	}
}

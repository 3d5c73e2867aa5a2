//go:build linux

package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/localdev/gateway"
	"mediator/localdev/issuer"
	"mediator/shared/config"
)

// These tests run the mediator binary with OAuth 2.0 client credentials against a stack in
// make dev AUTH=jwt's mode: the local issuer, and the real handlers on PostgreSQL behind the
// local gateway, whose people's routes take the issuer's JWTs as API Gateway's JWT authorizer
// does and whose nodes' routes keep the development tokens.

// jwtServed is such a stack; people counts the requests that carried a JWT.
type jwtServed struct {
	base   string
	iss    *issuer.Issuer
	people *atomic.Int32
}

func serveJWT(t *testing.T, o issuer.Options, opts ...apitest.Option) jwtServed {
	t.Helper()
	if o.Clients == nil {
		o.Clients = issuer.DevClients()
	}
	iss, err := issuer.Start("127.0.0.1:0", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Close() })
	people := &atomic.Int32{}
	count := func(gw http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ey") {
				people.Add(1)
			}
			gw.ServeHTTP(w, r)
		})
	}
	base := apitest.New(t, opts...).ServeJWT(&gateway.JWTAuthorizer{Issuer: iss.URL(), Audience: iss.ClientIDs()}, count)
	return jwtServed{base: base, iss: iss, people: people}
}

// mediatorWith runs the binary to its end with env as its only MEDIATOR_ settings.
func mediatorWith(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MEDIATOR_") && !strings.HasPrefix(kv, "NO_COLOR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		r.code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// secretFile holds a dev client's secret as a person would write it, ending in a newline.
func secretFile(t *testing.T, clientID string) string {
	t.Helper()
	for _, c := range issuer.DevClients() {
		if c.ID == clientID {
			return file(t, clientID+".secret", c.Secret+"\n")
		}
	}
	t.Fatalf("no dev client %s", clientID)
	return ""
}

// submit --wait with client credentials follows a run of about 20 s to SUCCEEDED while tokens
// live 5 s: it fetches a new token before each expires — several in all, and fewer than the
// requests it made, each serving several — while a real agent on its development node token
// runs the run.
func TestJWTSubmitWaitRenewsTokens(t *testing.T) {
	t.Parallel()
	s := serveJWT(t, issuer.Options{Lifetime: 5 * time.Second}, apitest.Configure(func(c *config.Config) { c.LeaseTTL = agentTTL }))
	n := startAgent(t, s.base, "jwt-1", agentOpts{labels: []string{"kind=jwt"}})
	n.waitFor("heartbeating")
	run := file(t, "run.yaml", `run_id: renew
needs: [kind=jwt]
steps:
  - {id: first, spec: {cmd: sleep 10}}
  - {id: second, after: [first], spec: {cmd: sleep 10}}
`)
	r := mediatorWith(t, []string{"MEDIATOR_URL=" + s.base},
		"--token-url", s.iss.TokenURL(), "--client-id", "dev-ci", "--client-secret-file", secretFile(t, "dev-ci"),
		"submit", "-f", run, "--wait")
	expect(t, r, 0, "run renew: SUCCEEDED")
	issued, requests := s.iss.Issued("dev-ci"), int(s.people.Load())
	t.Logf("%d tokens for %d requests", issued, requests)
	if issued < 3 || issued >= requests {
		t.Fatalf("%d tokens issued for %d requests: want 3 or more, each serving more than one request", issued, requests)
	}
}

// The same credentials from the environment: MEDIATOR_TOKEN_URL, MEDIATOR_CLIENT_ID, the
// secret in MEDIATOR_CLIENT_SECRET or a file named by MEDIATOR_CLIENT_SECRET_FILE, and
// MEDIATOR_SCOPE. What the token says decides what the caller may do: dev-ops is an admin,
// dev-ci a client, which may not ask for the admin's scope.
func TestTokenCredentialsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	s := serveJWT(t, issuer.Options{})
	env := func(kv ...string) []string {
		return append([]string{"MEDIATOR_URL=" + s.base, "MEDIATOR_TOKEN_URL=" + s.iss.TokenURL()}, kv...)
	}
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ops", "MEDIATOR_CLIENT_SECRET=dev-ops-secret", "MEDIATOR_SCOPE=mediator/admin"), "nodes"), 0)
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ci", "MEDIATOR_CLIENT_SECRET_FILE="+secretFile(t, "dev-ci")), "queue"), 0)
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ci", "MEDIATOR_CLIENT_SECRET=dev-ci-secret"), "nodes"), 3, "403 forbidden")
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ci", "MEDIATOR_CLIENT_SECRET=dev-ci-secret", "MEDIATOR_SCOPE=mediator/client mediator/admin"), "queue"),
		3, "invalid_scope")
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ci", "MEDIATOR_CLIENT_SECRET=wrong"), "queue"), 3, "invalid_client", s.iss.TokenURL())
	// --scope, repeatable or space-separated, beats MEDIATOR_SCOPE.
	expect(t, mediatorWith(t, env("MEDIATOR_CLIENT_ID=dev-ci", "MEDIATOR_CLIENT_SECRET=dev-ci-secret", "MEDIATOR_SCOPE=mediator/admin"),
		"--scope", "mediator/client", "queue"), 0)
	if got := s.iss.Issued("dev-ops") + s.iss.Issued("dev-ci"); got != 4 {
		t.Fatalf("%d tokens issued, want one for each command that got one", got)
	}
}

// Credentials that cannot work stop the command before it calls anything (exit 3), saying
// why; a flag beats the other kind's variable.
func TestTokenFlagsRefuseWhatCannotWork(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	tokenURL := "http://127.0.0.1:1/oauth2/token" // never reached
	secret := file(t, "secret", "s3cret\n")
	empty := file(t, "empty", "\n")
	url := "MEDIATOR_URL=" + base
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"both variables", []string{url, "MEDIATOR_TOKEN=dev-client", "MEDIATOR_TOKEN_URL=" + tokenURL}, nil, "MEDIATOR_TOKEN and MEDIATOR_TOKEN_URL are both set"},
		{"both flags", []string{url}, []string{"--token", "dev-client", "--token-url", tokenURL}, "give one"},
		{"plain http elsewhere", []string{url}, []string{"--token-url", "http://issuer.example/oauth2/token", "--client-id", "ci", "--client-secret-file", secret}, "must be https://"},
		{"not a URL", []string{url}, []string{"--token-url", "issuer", "--client-id", "ci", "--client-secret-file", secret}, "must be an https:// URL"},
		{"no client id", []string{url}, []string{"--token-url", tokenURL, "--client-secret-file", secret}, "needs --client-id"},
		{"no secret", []string{url}, []string{"--token-url", tokenURL, "--client-id", "ci"}, "needs the client's secret"},
		{"an empty secret file", []string{url}, []string{"--token-url", tokenURL, "--client-id", "ci", "--client-secret-file", empty}, "is empty"},
		{"a missing secret file", []string{url}, []string{"--token-url", tokenURL, "--client-id", "ci", "--client-secret-file", secret + ".missing"}, "no such file"},
		{"both secrets", []string{url, "MEDIATOR_TOKEN_URL=" + tokenURL, "MEDIATOR_CLIENT_ID=ci", "MEDIATOR_CLIENT_SECRET_FILE=" + secret, "MEDIATOR_CLIENT_SECRET=x"}, nil, "both set"},
		{"a client id alone", []string{url}, []string{"--client-id", "ci"}, "go with --token-url"},
		{"iam and a token URL", []string{url, "MEDIATOR_TOKEN_URL=" + tokenURL}, []string{"--auth", "iam"}, "takes no --token-url"},
	} {
		r := mediatorWith(t, tc.env, append(tc.args, "queue")...)
		if r.code != 3 || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%s: want exit 3 saying %q; got %s", tc.name, tc.says, r)
		}
	}
	// The flag of one kind wins over the other kind's variable.
	expect(t, mediatorWith(t, []string{url, "MEDIATOR_TOKEN_URL=" + tokenURL}, "--token", "dev-client", "queue"), 0)
}

// mediator agent builds its client as every command does: with client credentials it fetches
// its token at the token URL. make dev's nodes' routes take only the development tokens,
// standing in for IAM, so the handler refuses the JWT as no principal (401); the agent renews
// its token once, is refused again, and stops as a node the API refuses — two tokens, not a
// loop.
func TestTheAgentFetchesItsTokenByClientCredentials(t *testing.T) {
	t.Parallel()
	s := serveJWT(t, issuer.Options{})
	n := startAgent(t, s.base, "jwt-2", agentOpts{labels: []string{"kind=jwt"}, args: []string{
		"--token-url", s.iss.TokenURL(), "--client-id", "dev-ci", "--client-secret-file", secretFile(t, "dev-ci"),
	}})
	rec := n.waitFor("the API refuses this node's heartbeat")
	if e, _ := rec["error"].(string); !strings.Contains(e, "401") {
		t.Fatalf("the refusal: %v", rec)
	}
	if code := n.wait(); code != 3 {
		t.Fatalf("the agent exited %d, want 3 (a refused heartbeat)", code)
	}
	if got := s.iss.Issued("dev-ci"); got != 2 {
		t.Fatalf("%d tokens issued, want 2: the first, and one renewal after the 401", got)
	}
}

package issuer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"mediator/shared/auth"
	"mediator/shared/config"
)

// People sign in here for the web console, as they would at a Cognito user pool's hosted
// pages: the authorization code grant with PKCE (RFC 7636, S256 only) for one public client,
// ConsoleClient, whose redirect is a local console's callback. The sign-in page asks no
// password: it offers the two people make dev knows, a client and an admin.

// ConsoleClient is the public app client (no secret) the local console signs people in as.
const ConsoleClient = "dev-console"

// AuthorizePath is the authorization endpoint, where Cognito's hosted UI has it.
const AuthorizePath = "/oauth2/authorize"

// Person is who may sign in at the local sign-in page, and the scope their token carries.
type Person struct {
	ID    string
	Scope string
}

// DevPeople are the people of the local sign-in page. (A deployed stack makes its admins by
// the admin group, never by a scope a sign-in asks for; locally the admin simply gets
// mediator/admin.)
func DevPeople() []Person {
	return []Person{{ID: "dev-person", Scope: auth.ScopeClient}, {ID: "dev-admin-person", Scope: auth.ScopeAdmin}}
}

// codeLife is how long an authorization code may wait to be traded.
const codeLife = time.Minute

type grant struct {
	redirect, challenge string
	person              Person
	expires             time.Time
}

// AuthorizeURL is the authorization endpoint.
func (i *Issuer) AuthorizeURL() string { return i.url + AuthorizePath }

// consoleRedirect reports whether uri is a local console's callback: http on a loopback
// address, path /console/callback.
func consoleRedirect(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "http" || u.Path != "/console/callback" || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

var signInPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in (local issuer)</title></head>
<body><h1>Sign in to Mediator</h1><p>The local issuer of make dev AUTH=jwt: choose who you are.</p>
<form method="post" action="{{.Action}}">
{{range $k, $v := .Hidden}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}
{{range .People}}<button type="submit" name="person" value="{{.ID}}" id="as-{{.ID}}">{{.ID}} ({{.Scope}})</button> {{end}}
</form></body></html>`))

// authorize is the authorization endpoint: GET shows the sign-in page for a valid request,
// POST (the page's form) signs the person in and sends the browser back with a code.
func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "malformed request", http.StatusBadRequest)
		return
	}
	q := r.Form
	redirect := q.Get("redirect_uri")
	// A request that names no acceptable client or redirect is refused here, never sent on.
	if q.Get("client_id") != ConsoleClient || !consoleRedirect(redirect) {
		http.Error(w, "unknown client_id or redirect_uri (the local console's is http://127.0.0.1:<port>/console/callback)", http.StatusBadRequest)
		return
	}
	back := func(params url.Values) {
		params.Set("state", q.Get("state"))
		http.Redirect(w, r, redirect+"?"+params.Encode(), http.StatusSeeOther)
	}
	switch {
	case q.Get("response_type") != "code":
		back(url.Values{"error": {"unsupported_response_type"}})
		return
	case q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43:
		back(url.Values{"error": {"invalid_request"}, "error_description": {"PKCE with S256 is required"}})
		return
	}
	if r.Method == http.MethodGet {
		hidden := map[string]string{}
		for _, k := range []string{"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"} {
			hidden[k] = q.Get(k)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = signInPage.Execute(w, map[string]any{"Action": AuthorizePath, "Hidden": hidden, "People": i.people})
		return
	}
	var who *Person
	for _, p := range i.people {
		if p.ID == q.Get("person") {
			who = &p
		}
	}
	if who == nil {
		back(url.Values{"error": {"access_denied"}})
		return
	}
	code := randomText(24)
	i.mu.Lock()
	i.codes[code] = grant{redirect: redirect, challenge: q.Get("code_challenge"), person: *who, expires: time.Now().Add(codeLife)}
	i.mu.Unlock()
	back(url.Values{"code": {code}})
}

// tradeCode is the token endpoint's authorization_code grant for the console's public client:
// the code once, with the redirect it was given for and the verifier of its challenge. The
// answer may be read by the console's page (CORS), from its own origin.
func (i *Issuer) tradeCode(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && consoleRedirect(o+"/console/callback") {
		w.Header().Set("Access-Control-Allow-Origin", o)
		w.Header().Add("Vary", "Origin")
	}
	form := r.PostForm
	if form.Get("client_id") != ConsoleClient || form.Has("client_secret") {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "the authorization code grant is for the public client "+ConsoleClient)
		return
	}
	code := form.Get("code")
	i.mu.Lock()
	g, ok := i.codes[code]
	delete(i.codes, code) // once, whatever follows
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(form.Get("code_verifier")))
	switch {
	case !ok || time.Now().After(g.expires) || g.redirect != form.Get("redirect_uri"):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown, used or expired code, or another redirect_uri")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "the code_verifier does not match the code_challenge")
		return
	}
	claims := i.AccessClaims(ConsoleClient, []string{"openid", g.person.Scope}, time.Now())
	claims["sub"] = g.person.ID
	claims["username"] = g.person.ID
	signed, err := i.Sign(claims)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error", "signing the token")
		return
	}
	i.mu.Lock()
	i.issued[ConsoleClient]++
	i.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": signed, "token_type": "Bearer", "expires_in": int(i.lifetime / time.Second), "scope": "openid " + g.person.Scope,
	})
}

func randomText(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the OS's randomness failing: nothing can be issued
	}
	return strings.TrimRight(base64.RawURLEncoding.EncodeToString(b), "=")
}

// ConsoleSignIn is how a console behind this issuer signs people in (config.json): the code
// grant here, as ConsoleClient.
func (i *Issuer) ConsoleSignIn() config.Console {
	return config.Console{SignIn: "jwt", AuthorizeURL: i.AuthorizeURL(), TokenURL: i.TokenURL(), ClientID: ConsoleClient,
		Scopes: "openid " + auth.ScopeClient}
}

package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/config"
	"mediator/shared/console"
	"mediator/shared/startup"
)

// site serves the web console (shared/console): its files at /console/ and the sign-in
// settings at /console/config.json, to anyone — the files hold no secret, and every API call
// the console makes carries the signed-in person's credentials — under a strict
// Content-Security-Policy.
type site struct {
	d    startup.Deps
	once sync.Once
	csp  string
}

func newSite(d startup.Deps) *site { return &site{d: d} }

// policy is the Content-Security-Policy, built at the first page: connect-src names the API
// itself, the log bucket's origin (the presigned URLs of GET .../log point there) and, with
// JWT, the issuer's token endpoint; nothing else. A bucket whose origin cannot be read leaves
// it out: the console then shows no log text, and the rest works.
func (s *site) policy(ctx context.Context) string {
	s.once.Do(func() {
		var connect []string
		if s.d.Logs != nil {
			if o, err := s.d.Logs.Origin(ctx); err == nil {
				connect = append(connect, o)
			} else {
				s.d.Log.Warn("console: the log bucket's origin", "error", err.Error())
			}
		}
		if c := s.d.Config.Console; c.SignIn == "jwt" {
			connect = append(connect, console.Origin(c.TokenURL))
		}
		s.csp = console.CSP(connect...)
	})
	return s.csp
}

func (s *site) answer(ctx context.Context, contentType string, body []byte) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: string(body), Headers: map[string]string{
		"content-type":            contentType,
		"cache-control":           "no-cache",
		"content-security-policy": s.policy(ctx),
		"x-content-type-options":  "nosniff",
		// An OAuth callback's address holds the code: no page it links to is told it.
		"referrer-policy": "no-referrer",
		"x-frame-options": "DENY",
	}}
}

// page is /console and every path under it: the file of that name, or the app (index.html),
// which routes by the address.
func (s *site) page(c *call) events.APIGatewayV2HTTPResponse {
	body, contentType := console.Page(c.req.PathParameters["proxy"])
	return s.answer(c.ctx, contentType, body)
}

// consoleConfig is what the console needs to sign people in (config.Console), from the
// function's environment.
type consoleConfig struct {
	SignIn       string `json:"sign_in"`
	AuthorizeURL string `json:"authorize_url,omitempty"`
	TokenURL     string `json:"token_url,omitempty"`
	ClientID     string `json:"client_id,omitempty"`
	Scopes       string `json:"scopes,omitempty"`
}

func signInConfig(c config.Console) consoleConfig {
	out := consoleConfig{SignIn: c.SignIn}
	if c.SignIn == "jwt" {
		out.AuthorizeURL, out.TokenURL, out.ClientID, out.Scopes = c.AuthorizeURL, c.TokenURL, c.ClientID, c.Scopes
	}
	return out
}

func (s *site) config(c *call) events.APIGatewayV2HTTPResponse {
	body, _ := json.Marshal(signInConfig(c.d.Config.Console)) // strings only: it cannot fail
	a := s.answer(c.ctx, "application/json", body)
	a.Headers["cache-control"] = "no-store"
	return a
}

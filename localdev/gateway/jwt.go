package gateway

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"
)

// JWTAuthorizer plays API Gateway's JWT authorizer (HTTP API) for the routes that require one:
// it finds the issuer's keys through its discovery document, as API Gateway does, and passes a
// request to the function only with a bearer JWT that
//   - is signed with RS256, RS384 or RS512 by a key of the JWKS, under the kid it names;
//   - has iss equal to Issuer;
//   - has an aud in Audience or, with no aud at all, a client_id in Audience (Cognito's access
//     tokens carry client_id and no aud);
//   - has an exp after now, and an nbf and iat, if any, not after now, with no leeway;
//   - carries one of the route's scopes, in scope (space-separated) or scp.
//
// The function then gets the token's claims as API Gateway renders them (every value a
// string) and its scopes. What the token says beyond that — token_use, mediator_kind, groups —
// is the function's to judge (shared/auth), as it is behind API Gateway, which cannot tell an
// ID token from an access token.
type JWTAuthorizer struct {
	Issuer   string
	Audience []string
	// HTTP fetches the discovery document and the JWKS; nil is http.DefaultClient.
	HTTP *http.Client

	mu   sync.Mutex // held across a fetch of the keys
	keys map[string]*rsa.PublicKey
}

// refusal is API Gateway's own answer to a request its authorizer refused: 401 for no token or
// an invalid one, 403 for a valid one without the route's scope, each with the body API
// Gateway sends and a WWW-Authenticate header saying why (RFC 6750 §3).
type refusal struct {
	status    int
	challenge string
}

func unauthorized(why string) *refusal {
	return &refusal{http.StatusUnauthorized, fmt.Sprintf(`Bearer scope="" error="invalid_token" error_description=%q`, why)}
}

func (r *refusal) write(w http.ResponseWriter) {
	w.Header().Set("www-authenticate", r.challenge)
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(r.status)
	_, _ = fmt.Fprintf(w, `{"message":%q}`, http.StatusText(r.status))
}

// jwtMethods are the algorithms API Gateway's JWT authorizer accepts: RSA's, no others.
var jwtMethods = []string{"RS256", "RS384", "RS512"}

// Authorize checks the Authorization header against the authorizer's rules and a route that
// requires one of scopes, and gives the authorizer context API Gateway would, or its refusal.
func (a *JWTAuthorizer) Authorize(ctx context.Context, header string, scopes []string) (*events.APIGatewayV2HTTPRequestContextAuthorizerDescription, *refusal) {
	raw := strings.TrimSpace(header)
	if len(raw) > 7 && strings.EqualFold(raw[:7], "bearer ") {
		raw = strings.TrimSpace(raw[7:])
	}
	if raw == "" {
		return nil, unauthorized("no token")
	}
	claims := jwt.MapClaims{}
	parser := jwt.NewParser(jwt.WithValidMethods(jwtMethods), jwt.WithIssuer(a.Issuer),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithJSONNumber())
	if _, err := parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return a.key(ctx, kid)
	}); err != nil {
		return nil, unauthorized(err.Error())
	}
	if !a.audienceOK(claims) {
		return nil, unauthorized("the token does not have a valid audience")
	}
	has := tokenScopes(claims)
	if !slices.ContainsFunc(scopes, func(s string) bool { return slices.Contains(has, s) }) {
		return nil, &refusal{http.StatusForbidden, fmt.Sprintf(`Bearer scope=%q error="insufficient_scope" error_description="the token does not have the route's scopes"`, strings.Join(scopes, " "))}
	}
	rendered := make(map[string]string, len(claims))
	for k, v := range claims {
		rendered[k] = claimString(v)
	}
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: rendered, Scopes: has},
	}, nil
}

// audienceOK: aud when the token has one (API Gateway then ignores client_id), else client_id.
func (a *JWTAuthorizer) audienceOK(claims jwt.MapClaims) bool {
	aud, err := claims.GetAudience()
	if err != nil {
		return false
	}
	if _, present := claims["aud"]; present {
		return slices.ContainsFunc(aud, func(s string) bool { return slices.Contains(a.Audience, s) })
	}
	id, ok := claims["client_id"].(string)
	return ok && slices.Contains(a.Audience, id)
}

// tokenScopes are the token's scopes: scope, space-separated (RFC 8693 §4.2), and scp, a
// string or a list, as API Gateway reads either.
func tokenScopes(claims jwt.MapClaims) []string {
	var out []string
	add := func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, strings.Fields(v)...)
		case []any:
			for _, s := range v {
				if s, ok := s.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	add(claims["scope"])
	add(claims["scp"])
	return out
}

// claimString renders a claim as API Gateway's HTTP API puts it in the authorizer context,
// where every value is a string: a number as written in the token ("1767225600"), a boolean
// as true or false, a list as its items space-separated in brackets ("[ops admins]"), an object
// as its JSON.
func claimString(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	case []any:
		items := make([]string, len(v))
		for i, item := range v {
			items[i] = claimString(item)
		}
		return "[" + strings.Join(items, " ") + "]"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// key is the issuer's public key kid. A kid not among the keys fetched fetches them again —
// the issuer may have rotated its key (make dev restarted) — and a kid still unknown refuses
// the token.
func (a *JWTAuthorizer) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	if kid == "" {
		return nil, errors.New("the token names no kid")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if k, ok := a.keys[kid]; ok {
		return k, nil
	}
	keys, err := a.fetchKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("the issuer's keys: %w", err)
	}
	a.keys = keys
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("no key %q in the issuer's JWKS", kid)
}

// fetchKeys reads the discovery document under Issuer, which must name Issuer itself, and the
// RSA keys of the JWKS it points to.
func (a *JWTAuthorizer) fetchKeys(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := a.getJSON(ctx, strings.TrimRight(a.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
		return nil, err
	}
	if doc.Issuer != a.Issuer || doc.JWKSURI == "" {
		return nil, fmt.Errorf("the discovery document names issuer %q and jwks_uri %q", doc.Issuer, doc.JWKSURI)
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := a.getJSON(ctx, doc.JWKSURI, &set); err != nil {
		return nil, err
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		n, errN := base64.RawURLEncoding.DecodeString(k.N)
		e, errE := base64.RawURLEncoding.DecodeString(k.E)
		if k.Kty != "RSA" || k.Kid == "" || errN != nil || errE != nil || len(e) == 0 || len(e) > 4 {
			continue
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	return keys, nil
}

func (a *JWTAuthorizer) getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	h := a.HTTP
	if h == nil {
		h = http.DefaultClient
	}
	resp, err := h.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

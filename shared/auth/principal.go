// Package auth says who is calling (DESIGN.md, Who may do what). The principal comes only from what API
// Gateway's authorizer put in the request context — a Lambda authorizer's context, JWT claims,
// or the IAM caller — never from a header the handler parses itself. The local gateway plays
// the authorizer's part for `make dev`.
package auth

import (
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// Kind is what a principal may do.
type Kind string

const (
	Client Kind = "client"
	Node   Kind = "node"
	Admin  Kind = "admin"
)

// The scopes a JWT access token carries, of the resource server "mediator" at the stack's
// issuer. Every JWT route requires one of them (Scopes), so API Gateway itself refuses a token
// that has none.
const (
	ScopeClient = "mediator/client"
	ScopeAdmin  = "mediator/admin"
)

// Scopes are the scopes a JWT route requires one of.
var Scopes = []string{ScopeClient, ScopeAdmin}

// Principal is an authenticated caller.
type Principal struct {
	Kind Kind
	ID   string
}

// Owner is how runs record who submitted them: kind and id, so a client and an admin that
// happen to share an id never share runs.
func (p Principal) Owner() string { return string(p.Kind) + ":" + p.ID }

// IsAdmin reports whether p may act on anything.
func (p Principal) IsAdmin() bool { return p.Kind == Admin }

// Settings say which callers are admins and nodes (DESIGN.md, Who may do what). IAM: a caller
// that assumed AdminRole is an admin, one that assumed NodeRole is the node named by its role
// session name, any other IAM caller a client. JWT: a token that carries the client scope is an
// admin's when its subject is a member of AdminGroup, the issuer's group of admins (Cognito's
// cognito:groups claim, which only the user pool's administrators set).
type Settings struct {
	AdminRole  string
	NodeRole   string
	AdminGroup string
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/+=,-]{0,199}$`)

// OwnerPattern is an owner as runs record it (Principal.Owner): a kind, a colon, an id.
var OwnerPattern = regexp.MustCompile(`^(client|node|admin):` + strings.TrimPrefix(idPattern.String(), "^"))

// Authorizer is p as a Lambda authorizer's context, as FromRequest reads it back: what the local
// gateway and the benchmarks put in the events they build.
func (p Principal) Authorizer() *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		Lambda: map[string]any{"kind": string(p.Kind), "id": p.ID},
	}
}

// FromRequest finds the principal in the authorizer context; false when there is none (401).
func FromRequest(req events.APIGatewayV2HTTPRequest, set Settings) (Principal, bool) {
	a := req.RequestContext.Authorizer
	if a == nil {
		return Principal{}, false
	}
	var p Principal
	switch {
	case a.Lambda != nil:
		kind, _ := a.Lambda["kind"].(string)
		id, _ := a.Lambda["id"].(string)
		p = Principal{Kind: Kind(kind), ID: id}
	case a.JWT != nil:
		p = fromJWT(a.JWT, set.AdminGroup)
	case a.IAM != nil:
		p = fromIAM(a.IAM, set)
	}
	if !p.valid() {
		return Principal{}, false
	}
	return p, true
}

func (p Principal) valid() bool {
	switch p.Kind {
	case Client, Node, Admin:
		return idPattern.MatchString(p.ID)
	}
	return false
}

// fromJWT reads an access token's claims, as API Gateway's JWT authorizer passes them once it has
// checked the token's signature, issuer, audience, expiry and that it carries one of Scopes. The
// kind is a scope (ScopeAdmin, else ScopeClient) the issuer grants only to the app clients
// allowed it, raised to admin by membership of adminGroup; the id is sub, which the issuer alone
// sets (a user's immutable id, or for a client-credentials token the app client's id). Neither
// comes from a custom claim: a user pool may map one from an attribute its users edit, and then
// anyone could name themselves an admin or another client.
func fromJWT(j *events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription, adminGroup string) Principal {
	// A Cognito ID token says token_use "id", and its aud is the app client, which the authorizer
	// accepts as an audience: it proves who signed in, not what they may call.
	if use, ok := j.Claims["token_use"]; ok && use != "access" {
		return Principal{}
	}
	scopes := append([]string{}, j.Scopes...)
	scopes = append(scopes, strings.Fields(j.Claims["scope"])...)
	var kind Kind
	switch {
	case slices.Contains(scopes, ScopeAdmin):
		kind = Admin
	case slices.Contains(scopes, ScopeClient):
		kind = Client
		if adminGroup != "" && slices.Contains(listClaim(j.Claims["cognito:groups"]), adminGroup) {
			kind = Admin
		}
	default:
		return Principal{}
	}
	return Principal{Kind: kind, ID: j.Claims["sub"]}
}

// listClaim reads a list claim the way API Gateway's JWT authorizer writes one into the claims it
// passes a function, every value a string: the items between brackets, separated by spaces
// ("[admins ops]"; Cognito group names hold no spaces). A value of any other shape is not what
// API Gateway writes for a list, and names no group: admin is granted on the known shape only.
func listClaim(v string) []string {
	inner, ok := strings.CutPrefix(v, "[")
	if !ok {
		return nil
	}
	if inner, ok = strings.CutSuffix(inner, "]"); !ok {
		return nil
	}
	return strings.Fields(inner)
}

// fromIAM reads arn:aws:sts::<acct>:assumed-role/<role>/<session> and IAM user ARNs.
func fromIAM(iam *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription, roles Settings) Principal {
	arn := iam.UserARN
	if _, rest, ok := strings.Cut(arn, ":assumed-role/"); ok {
		role, session, _ := strings.Cut(rest, "/")
		switch {
		case roles.AdminRole != "" && role == roles.AdminRole:
			return Principal{Kind: Admin, ID: session}
		case roles.NodeRole != "" && role == roles.NodeRole:
			return Principal{Kind: Node, ID: session}
		}
		return Principal{Kind: Client, ID: role}
	}
	if i := strings.LastIndex(arn, ":user/"); i >= 0 {
		return Principal{Kind: Client, ID: arn[i+len(":user/"):]}
	}
	return Principal{}
}

// Package auth says who is calling (DESIGN.md, Who may do what). The principal comes only from what API
// Gateway's authorizer put in the request context — a Lambda authorizer's context, JWT claims,
// or the IAM caller — never from a header the handler parses itself. The local gateway plays
// the authorizer's part for `make dev`.
package auth

import (
	"regexp"
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

// IAMRoles maps IAM callers to kinds: a caller that assumed AdminRole is an admin, one that
// assumed NodeRole is the node named by its role session name; anyone else is a client.
type IAMRoles struct {
	AdminRole string
	NodeRole  string
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
func FromRequest(req events.APIGatewayV2HTTPRequest, roles IAMRoles) (Principal, bool) {
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
		p = fromJWT(a.JWT)
	case a.IAM != nil:
		p = fromIAM(a.IAM, roles)
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

// fromJWT: the kind is a scope (mediator/admin, mediator/node, mediator/client) or the claim
// mediator_kind; the id is the claim mediator_id, else sub.
func fromJWT(j *events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription) Principal {
	id := j.Claims["mediator_id"]
	if id == "" {
		id = j.Claims["sub"]
	}
	scopes := append([]string{}, j.Scopes...)
	scopes = append(scopes, strings.Fields(j.Claims["scope"])...)
	for _, k := range []Kind{Admin, Node, Client} {
		for _, s := range scopes {
			if s == "mediator/"+string(k) {
				return Principal{Kind: k, ID: id}
			}
		}
	}
	return Principal{Kind: Kind(j.Claims["mediator_kind"]), ID: id}
}

// fromIAM reads arn:aws:sts::<acct>:assumed-role/<role>/<session> and IAM user ARNs.
func fromIAM(iam *events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription, roles IAMRoles) Principal {
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

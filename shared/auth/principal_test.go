package auth_test

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/auth"
)

func request(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{Authorizer: a}}
}

// jwt is a JWT authorizer's context as API Gateway writes it: every claim a string, the token's
// scopes as a list.
func jwt(claims map[string]string, scopes ...string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
		Claims: claims, Scopes: scopes}}
}

func iam(arn string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
		UserARN: arn}}
}

// A stack of either authorizer: the node and admin roles, and the issuer's group of admins.
var stack = auth.Settings{AdminRole: "mediator-admin", NodeRole: "mediator-node", AdminGroup: "mediator-admins"}

func TestPrincipalSources(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		a    *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		set  *auth.Settings // nil: stack
		want string         // owner, or "" for none
	}{
		{name: "none", want: ""},
		{name: "lambda authorizer", a: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "node", "id": "n1"}}, want: "node:n1"},
		{name: "lambda, unknown kind", a: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "root", "id": "x"}}, want: ""},
		{name: "lambda, id with spaces", a: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "client", "id": "a b"}}, want: ""},

		// JWT: the kind is a scope, or the admin group; the id is sub.
		{name: "the admin scope", a: jwt(map[string]string{"sub": "abc", "token_use": "access", "scope": "mediator/admin"}, "mediator/admin"), want: "admin:abc"},
		{name: "the client scope, in the scope claim alone", a: jwt(map[string]string{"sub": "abc", "scope": "openid mediator/client"}), want: "client:abc"},
		{name: "a client-credentials token: sub is the app client", a: jwt(map[string]string{
			"sub": "3n4b5urk1ft4fl3mg5e62d9ado", "client_id": "3n4b5urk1ft4fl3mg5e62d9ado", "token_use": "access", "scope": "mediator/client"}, "mediator/client"),
			want: "client:3n4b5urk1ft4fl3mg5e62d9ado"},
		{name: "mediator_kind admin beside the client scope is a client", a: jwt(map[string]string{"sub": "abc", "mediator_kind": "admin", "scope": "mediator/client"}, "mediator/client"), want: "client:abc"},
		{name: "mediator_kind admin without a scope is no one", a: jwt(map[string]string{"sub": "abc", "mediator_kind": "admin"}), want: ""},
		{name: "mediator_id does not name the principal", a: jwt(map[string]string{"sub": "abc", "mediator_id": "someone-else", "scope": "mediator/client"}, "mediator/client"), want: "client:abc"},
		{name: "an ID token with otherwise good claims", a: jwt(map[string]string{
			"sub": "abc", "token_use": "id", "aud": "3n4b5urk1ft4fl3mg5e62d9ado", "cognito:groups": "[mediator-admins]", "scope": "mediator/admin"}, "mediator/admin"), want: ""},
		{name: "a token_use that is present and empty", a: jwt(map[string]string{"sub": "abc", "token_use": "", "scope": "mediator/admin"}, "mediator/admin"), want: ""},
		{name: "no Mediator scope", a: jwt(map[string]string{"sub": "abc", "token_use": "access", "scope": "openid email"}, "openid", "email"), want: ""},
		{name: "the node scope makes no node: nodes sign with IAM", a: jwt(map[string]string{"sub": "board-7", "scope": "mediator/node"}, "mediator/node"), want: ""},
		{name: "no sub", a: jwt(map[string]string{"client_id": "ci", "scope": "mediator/client"}, "mediator/client"), want: ""},

		// The admin group, as API Gateway writes a list claim: "[a b]".
		{name: "a member of the admin group", a: jwt(map[string]string{"sub": "u-1", "token_use": "access", "cognito:groups": "[mediator-admins testers]", "scope": "mediator/client"}, "mediator/client"), want: "admin:u-1"},
		{name: "the admin group alone in the list", a: jwt(map[string]string{"sub": "u-1", "cognito:groups": "[mediator-admins]", "scope": "mediator/client"}, "mediator/client"), want: "admin:u-1"},
		{name: "other groups only", a: jwt(map[string]string{"sub": "u-1", "cognito:groups": "[testers mediator-admins-old]", "scope": "mediator/client"}, "mediator/client"), want: "client:u-1"},
		{name: "the group's name but not as a list", a: jwt(map[string]string{"sub": "u-1", "cognito:groups": "mediator-admins", "scope": "mediator/client"}, "mediator/client"), want: "client:u-1"},
		{name: "the group as another claim", a: jwt(map[string]string{"sub": "u-1", "groups": "[mediator-admins]", "scope": "mediator/client"}, "mediator/client"), want: "client:u-1"},
		{name: "the admin group without a Mediator scope", a: jwt(map[string]string{"sub": "u-1", "cognito:groups": "[mediator-admins]", "scope": "openid"}, "openid"), want: ""},
		{name: "a stack without an admin group", a: jwt(map[string]string{"sub": "u-1", "cognito:groups": "[mediator-admins]", "scope": "mediator/client"}, "mediator/client"),
			set: &auth.Settings{NodeRole: "mediator-node"}, want: "client:u-1"},

		// IAM, in either kind of stack: the node routes are IAM's in both.
		{name: "iam node role", a: iam("arn:aws:sts::123456789012:assumed-role/mediator-node/board-7"), want: "node:board-7"},
		{name: "iam node role, in a stack whose people use JWT", a: iam("arn:aws:sts::123456789012:assumed-role/mediator-node/i-0abc123def4567890"),
			set: &auth.Settings{NodeRole: "mediator-node", AdminGroup: "mediator-admins"}, want: "node:i-0abc123def4567890"},
		{name: "iam admin role", a: iam("arn:aws:sts::123456789012:assumed-role/mediator-admin/alice"), want: "admin:alice"},
		{name: "iam other role is a client", a: iam("arn:aws:sts::123456789012:assumed-role/ci-runner/build-9"), want: "client:ci-runner"},
		{name: "iam node role unnamed by the stack is a client", a: iam("arn:aws:sts::123456789012:assumed-role/mediator-node/board-7"),
			set: &auth.Settings{}, want: "client:mediator-node"},
		{name: "iam user", a: iam("arn:aws:iam::123456789012:user/bob"), want: "client:bob"},
	}
	for _, tc := range cases {
		set := stack
		if tc.set != nil {
			set = *tc.set
		}
		p, ok := auth.FromRequest(request(tc.a), set)
		got := ""
		if ok {
			got = p.Owner()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// What the local gateway writes into an event is what the handlers read back.
func TestAuthorizerRoundTrips(t *testing.T) {
	t.Parallel()
	for _, p := range []auth.Principal{{Kind: auth.Client, ID: "alice"}, {Kind: auth.Node, ID: "rpi-A"}, {Kind: auth.Admin, ID: "ops"}} {
		if got, ok := auth.FromRequest(request(p.Authorizer()), auth.Settings{}); !ok || got != p {
			t.Fatalf("%+v came back as %+v (%t)", p, got, ok)
		}
	}
}

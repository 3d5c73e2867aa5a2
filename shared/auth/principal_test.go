package auth_test

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/auth"
)

func request(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{RequestContext: events.APIGatewayV2HTTPRequestContext{Authorizer: a}}
}

func TestPrincipalSources(t *testing.T) {
	t.Parallel()
	roles := auth.IAMRoles{AdminRole: "mediator-admin", NodeRole: "mediator-node"}
	cases := []struct {
		name string
		a    *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want string // owner, or "" for none
	}{
		{"none", nil, ""},
		{"lambda authorizer", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "node", "id": "n1"}}, "node:n1"},
		{"lambda, unknown kind", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "root", "id": "x"}}, ""},
		{"lambda, id with spaces", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"kind": "client", "id": "a b"}}, ""},
		{"jwt scope", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"sub": "abc"}, Scopes: []string{"mediator/admin"}}}, "admin:abc"},
		{"jwt scope claim and node id", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"sub": "abc", "mediator_id": "board-7", "scope": "openid mediator/node"}}}, "node:board-7"},
		{"jwt without kind", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"sub": "abc"}}}, ""},
		{"iam node role", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			UserARN: "arn:aws:sts::123456789012:assumed-role/mediator-node/board-7"}}, "node:board-7"},
		{"iam admin role", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			UserARN: "arn:aws:sts::123456789012:assumed-role/mediator-admin/alice"}}, "admin:alice"},
		{"iam other role is a client", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			UserARN: "arn:aws:sts::123456789012:assumed-role/ci-runner/build-9"}}, "client:ci-runner"},
		{"iam user", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
			UserARN: "arn:aws:iam::123456789012:user/bob"}}, "client:bob"},
	}
	for _, tc := range cases {
		p, ok := auth.FromRequest(request(tc.a), roles)
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
		if got, ok := auth.FromRequest(request(p.Authorizer()), auth.IAMRoles{}); !ok || got != p {
			t.Fatalf("%+v came back as %+v (%t)", p, got, ok)
		}
	}
}

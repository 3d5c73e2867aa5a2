package httpapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/config"
	"mediator/shared/httpapi"
)

// templateAuth is the auth settings the functions of a stack deployed from template.yaml read:
// every variable of its functions' environment, each the parameter it names (its default, or
// the value given), through config.Load as a function reads them at start.
func templateAuth(t *testing.T, params map[string]string) auth.Settings {
	t.Helper()
	tpl := readCFN(t, "../../template.yaml")
	values, err := parameterValues(tpl, params)
	if err != nil {
		t.Fatal(err)
	}
	vars, _ := cfnAt(tpl, "Globals", "Function", "Environment", "Variables").(map[string]any)
	env := map[string]string{}
	for name, v := range vars {
		if name == "DB_SECRET_ARN" {
			continue // the test's own database, below
		}
		param, _ := cfnAt(v, "Ref").(string)
		value, ok := values[param]
		if cfnAt(tpl, "Resources", param, "Type") == "AWS::S3::Bucket" {
			// A bucket of the stack's own (LOG_BUCKET): its name, as CloudFormation makes it.
			value, ok = "mediator-"+strings.ToLower(param)+"-1a2b3c4d5e6f7", true
		}
		if !ok {
			t.Fatalf("%s is %v, not a parameter's value", name, v)
		}
		env[name] = fmt.Sprint(value)
	}
	// The database is the test's own (apitest); the template's is a parameter set apart.
	env["DATABASE_URL"], env["DB_SECRET_ARN"], env["DB_IAM_AUTH"] = "postgres://template.invalid/mediator", "", "false"
	cfg, err := config.Load(func(name string) string { return env[name] })
	if err != nil {
		t.Fatalf("the template's environment does not load: %v", err)
	}
	return cfg.Auth
}

// jwtStack is a Mediator whose handlers are configured as a JWT stack's, from template.yaml's
// defaults, with an admin group.
func jwtStack(t *testing.T) *apitest.Env {
	t.Helper()
	set := templateAuth(t, withParams(throwawayParams, append(slices.Clone(jwtParams), "JwtAdminGroup", "mediator-admins")...))
	if set.NodeRole == "" || set.AdminGroup != "mediator-admins" {
		t.Fatalf("a JWT stack's functions read %+v", set)
	}
	return apitest.New(t, apitest.Configure(func(c *config.Config) { c.Auth = set }))
}

// accessToken is the context API Gateway's JWT authorizer writes for a token with these claims:
// every claim a string, the scope claim's scopes as a list.
func accessToken(claims map[string]string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
		Claims: claims, Scopes: strings.Fields(claims["scope"])}}
}

// signedAs is the context API Gateway's IAM authorizer writes for a caller of a role's session.
func signedAs(role, session string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{
		AccessKey: "ASIAEXAMPLEEXAMPLE00", AccountID: "123456789012", CallerID: "AROAEXAMPLEEXAMPLE000:" + session,
		UserARN: "arn:aws:sts::123456789012:assumed-role/" + role + "/" + session, UserID: "AROAEXAMPLEEXAMPLE000:" + session}}
}

// In a JWT stack, through the handlers: nodes are the node role's sessions, and only as
// themselves; a token is a client's or an admin's by its scope or the admin group, with sub as
// its id; anything else is no one (401), or not allowed (403).
func TestJWTStackCallers(t *testing.T) {
	t.Parallel()
	env := jwtStack(t)
	nodeRole := env.Config.Auth.NodeRole
	send := func(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription, method, target string, body any) apitest.Response {
		t.Helper()
		ev, route := env.Event(apitest.Nobody, method, target, body)
		ev.RequestContext.Authorizer = a
		return env.Invoke(route.Function, ev)
	}
	beat := map[string]any{"boot_id": "a1", "labels": []string{"board=rpi4"}, "draining": false}
	ci := map[string]string{"sub": "4d1ci0app0client0id00000", "client_id": "4d1ci0app0client0id00000", "token_use": "access", "scope": "mediator/client"}

	if r := send(signedAs(nodeRole, "A"), "PUT", "/v1/nodes/A", beat); r.Status != 200 {
		t.Fatalf("node A's heartbeat, signed: %s", r)
	}
	if r := send(signedAs(nodeRole, "A"), "PUT", "/v1/nodes/B", beat); r.Status != 403 {
		t.Errorf("node A's heartbeat as B: %s", r)
	}
	if r := send(accessToken(ci), "POST", "/v1/runs", oneNodeRun("r1", "board=rpi4")); r.Status != 201 {
		t.Fatalf("the CI client's submit: %s", r)
	}

	for _, c := range []struct {
		name          string
		claims        map[string]string
		method, route string
		status        int
	}{
		{"the CI client reads its run", ci, "GET", "/v1/runs/r1", 200},
		{"an ID token of the same subject", map[string]string{"sub": ci["sub"], "aud": ci["client_id"], "token_use": "id", "scope": "mediator/client"}, "GET", "/v1/runs/r1", 401},
		{"mediator_id naming the CI client", map[string]string{"sub": "u-3", "mediator_id": ci["sub"], "token_use": "access", "scope": "mediator/client"}, "GET", "/v1/runs/r1", 404},
		{"mediator_kind admin with the client scope", map[string]string{"sub": "u-2", "mediator_kind": "admin", "token_use": "access", "scope": "mediator/client"}, "GET", "/v1/nodes", 403},
		{"no Mediator scope", map[string]string{"sub": "u-2", "token_use": "access", "scope": "openid email"}, "GET", "/v1/queue", 401},
		{"the admin scope", map[string]string{"sub": "ops-app", "token_use": "access", "scope": "mediator/admin"}, "GET", "/v1/nodes", 200},
		{"the admin scope reads any run", map[string]string{"sub": "ops-app", "token_use": "access", "scope": "mediator/admin"}, "GET", "/v1/runs/r1", 200},
		{"a member of the admin group", map[string]string{"sub": "u-4", "token_use": "access", "scope": "mediator/client", "cognito:groups": "[testers mediator-admins]"}, "GET", "/v1/leases", 200},
		{"a member of the admin group drains a node", map[string]string{"sub": "u-4", "token_use": "access", "scope": "mediator/client", "cognito:groups": "[mediator-admins]"}, "POST", "/v1/nodes/A/drain", 200},
		{"a member of the admin group lifts it", map[string]string{"sub": "u-4", "token_use": "access", "scope": "mediator/client", "cognito:groups": "[mediator-admins]"}, "DELETE", "/v1/nodes/A/drain", 200},
		{"a member of other groups", map[string]string{"sub": "u-5", "token_use": "access", "scope": "mediator/client", "cognito:groups": "[testers]"}, "GET", "/v1/leases", 403},
		{"the node scope on a heartbeat", map[string]string{"sub": "A", "token_use": "access", "scope": "mediator/node"}, "PUT", "/v1/nodes/A", 401},
		{"a client's token on a heartbeat", ci, "PUT", "/v1/nodes/A", 403},
	} {
		var body any
		if c.method == "PUT" {
			body = beat
		}
		if r := send(accessToken(c.claims), c.method, c.route, body); r.Status != c.status {
			t.Errorf("%s: %s %s answered %s, want %d", c.name, c.method, c.route, r, c.status)
		}
	}

	// The node reports the step it was handed, signed, under its lease.
	var b apitest.Beat
	r := send(signedAs(nodeRole, "A"), "PUT", "/v1/nodes/A", beat)
	if r.Decode(t, &b); len(b.Steps) != 1 || b.Lease == nil {
		t.Fatalf("node A holds %+v: %s", b.Lease, r)
	}
	report := map[string]any{"node_id": "A", "boot_id": "a1", "epoch": b.Lease.Epoch, "status": "started"}
	if r := send(signedAs(nodeRole, "B"), "POST", "/v1/runs/r1/steps/s1/result", report); r.Status != 403 {
		t.Errorf("node B reports A's step: %s", r)
	}
	if r := send(signedAs("ci-runner", "A"), "POST", "/v1/runs/r1/steps/s1/result", report); r.Status != 403 {
		t.Errorf("another role's session named A reports A's step: %s", r)
	}
	if r := send(signedAs(nodeRole, "A"), "POST", "/v1/runs/r1/steps/s1/result", report); r.Status != 200 {
		t.Errorf("node A reports its step: %s", r)
	}
}

// authorizerOf names the authorizer whose context an event carries: iam, jwt, lambda, or none
// (also for a context that names more than one, which API Gateway never writes).
func authorizerOf(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
	switch {
	case a == nil:
	case a.IAM != nil && a.JWT == nil && a.Lambda == nil:
		return "iam"
	case a.JWT != nil && a.IAM == nil && a.Lambda == nil:
		return "jwt"
	case a.Lambda != nil && a.IAM == nil && a.JWT == nil:
		return "lambda"
	}
	return "none"
}

// The sample events (localdev/events, what `sam local invoke -e` and the emulator tests send)
// are what a JWT stack's API Gateway sends: a route's caller decides its authorizer's context —
// IAM on the node routes, an access token with a Mediator scope on the people's — and, replayed
// in order through the handlers configured as template.yaml configures them, each is accepted.
func TestSampleEventsAreWhatAJWTStackSends(t *testing.T) {
	t.Parallel()
	env := jwtStack(t)
	callers := map[string]httpapi.Caller{}
	for _, r := range httpapi.Routes {
		callers[r.Key()] = r.Caller
	}
	files, err := filepath.Glob("../../localdev/events/*.json")
	if err != nil {
		t.Fatal(err)
	}
	played := map[string]events.APIGatewayV2HTTPRequest{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil || ev.Version != "2.0" {
			continue // not an HTTP API event: the schedule's, the migration's
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		a := ev.RequestContext.Authorizer
		switch caller, ok := callers[ev.RouteKey]; {
		case !ok:
			t.Errorf("%s: route %q is not in the route table", name, ev.RouteKey)
		case caller == httpapi.NodeCaller && authorizerOf(a) != "iam":
			t.Errorf("%s: %s is a node route, signed in every stack: want an IAM authorizer's context, not %s", name, ev.RouteKey, authorizerOf(a))
		case caller == httpapi.PeopleCaller && (authorizerOf(a) != "jwt" ||
			!slices.ContainsFunc(a.JWT.Scopes, func(s string) bool { return slices.Contains(auth.Scopes, s) })):
			t.Errorf("%s: %s takes access tokens with a Mediator scope in a JWT stack, not %s", name, ev.RouteKey, authorizerOf(a))
		}
		played[name] = ev
	}
	order := []string{"nodes", "submit", "query", "result", "cancel"}
	if got := slices.Sorted(maps.Keys(played)); !slices.Equal(got, slices.Sorted(slices.Values(order))) {
		t.Fatalf("the HTTP events are %v; this test plays %v", got, order)
	}
	want := map[string]int{"nodes": 200, "submit": 201, "query": 200, "result": 200, "cancel": 202}
	for _, name := range order {
		ev := played[name]
		fn := ""
		for _, r := range httpapi.Routes {
			if r.Key() == ev.RouteKey {
				fn = r.Function
			}
		}
		r := env.Invoke(fn, ev)
		if r.Status != want[name] {
			t.Fatalf("%s.json: %s answered %s, want %d", name, ev.RouteKey, r, want[name])
		}
		if name == "submit" {
			var placed runReply
			if r.Decode(t, &placed); placed.Run.Assigned["main"] != "rpi-a" {
				t.Fatalf("submit.json placed %+v, not on the node of nodes.json", placed.Run)
			}
		}
	}
}

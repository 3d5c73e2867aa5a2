package httpapi_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"mediator/localdev/prerequisites"
	"mediator/shared/auth"
	"mediator/shared/config"
	"mediator/shared/httpapi"
)

// samTransform is the script that runs SAM's own transform (aws-sam-translator, what
// CloudFormation and `sam deploy` run) over template.yaml with the given parameter values and
// prints the CloudFormation it makes. As `sam deploy` does after `sam package`, each function's
// code is an S3 object of its own. No policy is looked up by name: the managed-policy loader
// answers an empty map, which only a template naming AWS managed policies would need.
const samTransform = `
import json, sys
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

class NoManagedPolicies:
    def load(self):
        return {}

template = yaml_parse(open(sys.argv[1]).read())
template.get("Globals", {}).get("Function", {}).pop("CodeUri", None)
for logical_id, resource in template["Resources"].items():
    if resource["Type"] == "AWS::Serverless::Function":
        resource["Properties"]["CodeUri"] = "s3://artifacts/%s.zip" % logical_id
print(json.dumps(transform(template, json.loads(sys.argv[2]), NoManagedPolicies())))
`

// transformed runs samTransform. Without python3 and aws-sam-translator the test fails, saying
// what to install: a check that skips is a check nobody runs.
func transformed(t *testing.T, params map[string]string) map[string]any {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(python, "-c", "import samtranslator").Run()
	}
	if err != nil {
		t.Fatal("SAM's transform needs python3 with aws-sam-translator: " + prerequisites.Need("aws-sam-translator"))
	}
	args, _ := json.Marshal(params)
	cmd := exec.Command(python, "-c", samTransform, "../../template.yaml", string(args))
	// The transform asks boto3 for a Region; nothing here calls AWS.
	cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=eu-west-1", "AWS_REGION=eu-west-1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("SAM's transform refuses template.yaml with %v: %v\n%s", params, err, stderr.Bytes())
	}
	var cfn map[string]any
	if err := json.Unmarshal(out, &cfn); err != nil {
		t.Fatal(err)
	}
	return cfn
}

// publicRoutes are the route keys the OpenAPI contract lets anyone call (security: []).
func publicRoutes(t *testing.T) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var public []string
	paths, _ := cfnAt(cfnValue(&doc), "paths").(map[string]any)
	for path, ops := range paths {
		ops, _ := ops.(map[string]any)
		for method, op := range ops {
			if sec, ok := cfnAt(op, "security").([]any); ok && len(sec) == 0 {
				public = append(public, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(public)
	return public
}

// resourcesOf are the logical ids of one type in a transformed template.
func resourcesOf(cfn map[string]any, typ string) []string {
	var ids []string
	for id, r := range cfnAt(cfn, "Resources").(map[string]any) {
		if cfnAt(r, "Type") == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

var (
	integrationFunction = regexp.MustCompile(`/functions/\$\{(\w+)\.Arn\}/invocations$`)
	pathParameter       = regexp.MustCompile(`\{\w+\+?\}`) // {run_id}, and a greedy {proxy+}
)

// routesFor are the route keys of the route table whose caller is c.
func routesFor(c httpapi.Caller) []string {
	var keys []string
	for _, r := range httpapi.Routes {
		if r.Caller == c {
			keys = append(keys, r.Key())
		}
	}
	slices.Sort(keys)
	return keys
}

// What CloudFormation receives, for each authorizer: exactly the route table, each route
// invoking its function with API Gateway allowed to, each route authorized as its caller needs
// (securityFindings), the settings that map callers to principals in every function, the
// throttles, each function's policies, and the migration ordered before every function that
// needs the schema.
func TestTemplateTransformsToTheRouteTable(t *testing.T) {
	t.Parallel()
	public := publicRoutes(t)
	if anyone := routesFor(httpapi.AnyoneCaller); !slices.Equal(public, anyone) {
		t.Fatalf("the contract's public routes are %v, the route table's %v", public, anyone)
	}
	tpl := readCFN(t, "../../template.yaml")
	for _, authorizer := range []string{"IAM", "JWT"} {
		t.Run(authorizer, func(t *testing.T) {
			t.Parallel()
			params := withParams(passwordMode, "AuthorizerType", authorizer)
			if authorizer == "JWT" {
				// and a bus to publish run events to, and IoT Core to push hints through, so both
				// ways of the events' and the hints' wiring run
				params = withParams(params, append(slices.Clone(jwtParams), "EventBusName", "mediator-events",
					"IotDataEndpoint", "abc123example-ats.iot.us-east-1.amazonaws.com")...)
			}
			cfn := transformed(t, params)
			values, err := parameterValues(tpl, params)
			if err != nil {
				t.Fatal(err)
			}
			conditions, _ := cfnAt(cfn, "Conditions").(map[string]any)
			resolve := cfnEval{params: values, conditions: conditions}
			resources := cfnAt(cfn, "Resources").(map[string]any)

			apis := resourcesOf(cfn, "AWS::ApiGatewayV2::Api")
			if len(apis) != 1 || len(resourcesOf(cfn, "AWS::ApiGatewayV2::Route")) != 0 {
				t.Fatalf("APIs %v: want one, its routes in its OpenAPI body", apis)
			}
			body, err := resolve.eval(cfnAt(resources, apis[0], "Properties", "Body"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range securityFindings(body, authorizer, values) {
				t.Error(f)
			}

			// Routes: the body's, both ways against the route table.
			got := map[string]string{}
			paths, _ := cfnAt(body, "paths").(map[string]any)
			for path, ops := range paths {
				for method, op := range ops.(map[string]any) {
					key := strings.ToUpper(method) + " " + path
					uri, _ := cfnAt(op, "x-amazon-apigateway-integration", "uri", "Fn::Sub").(string)
					fn := ""
					if m := integrationFunction.FindStringSubmatch(uri); m != nil {
						fn = m[1]
					}
					got[key] = fn
					if cfnAt(op, "x-amazon-apigateway-integration", "payloadFormatVersion") != "2.0" {
						t.Errorf("%s: payload format is not 2.0", key)
					}
				}
			}
			for _, d := range diffRoutes(got, httpapi.Routes) {
				t.Error(d)
			}

			// API Gateway may invoke each route's function, for that route.
			permitted := map[string]string{}
			for _, id := range resourcesOf(cfn, "AWS::Lambda::Permission") {
				src, _ := cfnAt(resources, id, "Properties", "SourceArn", "Fn::Sub").([]any)
				if len(src) != 2 || cfnAt(src[1], "__ApiId__", "Ref") != apis[0] {
					continue
				}
				arn, _ := src[0].(string)
				_, route, _ := strings.Cut(arn, "${__Stage__}/")
				fn, _ := cfnAt(resources, id, "Properties", "FunctionName", "Ref").(string)
				permitted[route] = fn
			}
			for _, r := range httpapi.Routes {
				route := r.Method + pathParameter.ReplaceAllString(r.Path, "*")
				if permitted[route] != logicalID(r.Function) {
					t.Errorf("%s: API Gateway may invoke %q for it, want %s", r.Key(), permitted[route], logicalID(r.Function))
				}
			}

			// Throttles: every route a budget of its own, by its caller (throttleFindings).
			stages := resourcesOf(cfn, "AWS::ApiGatewayV2::Stage")
			if len(stages) != 1 {
				t.Fatalf("stages %v", stages)
			}
			stage := cfnAt(resources, stages[0], "Properties")
			if cfnAt(stage, "StageName") != "$default" || cfnAt(stage, "AutoDeploy") != true {
				t.Errorf("stage %v: want $default, auto-deployed", stage)
			}
			for _, f := range throttleFindings(t, cfn, resolve, values) {
				t.Error(f)
			}

			checkMigrationComesFirst(t, cfn, params["EventBusName"])
			for _, f := range policyFindings(t, cfn, resolve, params) {
				t.Error(f)
			}
			checkFunctionsKnowTheCallers(t, cfn)
			checkEachFunctionLogsInAsItsRole(t, cfn)
			if cfnAt(cfn, "Rules") == nil {
				t.Error("the transform dropped the Rules")
			}
		})
	}
}

// The security check bites: a body that authorizes one route otherwise than its caller needs
// is reported, naming the route (or the scheme).
func TestTemplateSecurityFindingsBite(t *testing.T) {
	t.Parallel()
	values := map[string]any{"JwtIssuer": "https://issuer.example.com", "JwtAudience": []any{"client-1"}}
	body := func(authorizer string) map[string]any {
		paths := map[string]any{}
		for _, r := range httpapi.Routes {
			op := map[string]any{}
			switch {
			case r.Caller == httpapi.NodeCaller || (r.Caller == httpapi.PeopleCaller && authorizer == "IAM"):
				op["security"] = []any{map[string]any{"Iam": []any{}}}
			case r.Caller == httpapi.PeopleCaller:
				op["security"] = []any{map[string]any{"Jwt": []any{"mediator/client", "mediator/admin"}}}
			}
			if paths[r.Path] == nil {
				paths[r.Path] = map[string]any{}
			}
			paths[r.Path].(map[string]any)[strings.ToLower(r.Method)] = op
		}
		schemes := map[string]any{"Iam": map[string]any{"type": "apiKey", "name": "Authorization", "in": "header", "x-amazon-apigateway-authtype": "awsSigv4"}}
		if authorizer == "JWT" {
			schemes["Jwt"] = map[string]any{"type": "oauth2", "x-amazon-apigateway-authorizer": map[string]any{
				"type": "jwt", "identitySource": "$request.header.Authorization",
				"jwtConfiguration": map[string]any{"issuer": values["JwtIssuer"], "audience": values["JwtAudience"]}}}
		}
		return map[string]any{"components": map[string]any{"securitySchemes": schemes}, "paths": paths}
	}
	for _, a := range []string{"IAM", "JWT"} {
		if found := securityFindings(body(a), a, values); found != nil {
			t.Fatalf("%s: a body as the route table says: %v", a, found)
		}
	}
	node, people, anyone := routesFor(httpapi.NodeCaller)[0], routesFor(httpapi.PeopleCaller)[0], routesFor(httpapi.AnyoneCaller)[0]
	op := func(b map[string]any, key string) map[string]any {
		method, path, _ := strings.Cut(key, " ")
		return cfnAt(b, "paths", path, strings.ToLower(method)).(map[string]any)
	}
	for _, c := range []struct {
		name, authorizer, about string
		doctor                  func(b map[string]any)
	}{
		{"a node route taking tokens", "JWT", node, func(b map[string]any) {
			op(b, node)["security"] = []any{map[string]any{"Jwt": []any{"mediator/client", "mediator/admin"}}}
		}},
		{"a node route left public", "IAM", node, func(b map[string]any) { delete(op(b, node), "security") }},
		{"a people route signed in a JWT stack", "JWT", people, func(b map[string]any) {
			op(b, people)["security"] = []any{map[string]any{"Iam": []any{}}}
		}},
		{"a people route needing the admin scope alone", "JWT", people, func(b map[string]any) {
			op(b, people)["security"] = []any{map[string]any{"Jwt": []any{"mediator/admin"}}}
		}},
		{"a people route taking a token of any scope", "JWT", people, func(b map[string]any) {
			op(b, people)["security"] = []any{map[string]any{"Jwt": []any{}}}
		}},
		{"a public route behind an authorizer", "IAM", anyone, func(b map[string]any) {
			op(b, anyone)["security"] = []any{map[string]any{"Iam": []any{}}}
		}},
		{"a JWT scheme of another issuer", "JWT", "Jwt", func(b map[string]any) {
			cfnAt(b, "components", "securitySchemes", "Jwt", "x-amazon-apigateway-authorizer", "jwtConfiguration").(map[string]any)["issuer"] = "https://other.example.com"
		}},
		{"a JWT scheme in an IAM stack", "IAM", "Iam, Jwt", func(b map[string]any) {
			cfnAt(b, "components", "securitySchemes").(map[string]any)["Jwt"] = map[string]any{"type": "oauth2"}
		}},
	} {
		b := body(c.authorizer)
		c.doctor(b)
		found := securityFindings(b, c.authorizer, values)
		if !slices.ContainsFunc(found, func(f string) bool { return strings.HasPrefix(f, c.about+":") }) {
			t.Errorf("%s: found %q, want a finding about %s", c.name, found, c.about)
		}
	}
}

// securityFindings are the ways an API's OpenAPI body (intrinsics resolved) authorizes its
// callers otherwise than the route table says, for a stack of AuthorizerType authorizer: the
// schemes are Iam (SigV4) and, in a JWT stack, Jwt, a JWT authorizer of JwtIssuer and
// JwtAudience; every NodeCaller route is Iam's whatever the stack; every PeopleCaller route is
// Iam's in an IAM stack and, in a JWT stack, Jwt's with exactly the Mediator scopes; every
// AnyoneCaller route has no security at all; and no requirement sits at the body's root, where
// it would apply to every route.
func securityFindings(body any, authorizer string, values map[string]any) []string {
	var out []string
	schemes, _ := cfnAt(body, "components", "securitySchemes").(map[string]any)
	want := []string{"Iam"}
	if authorizer == "JWT" {
		want = append(want, "Jwt")
	}
	if got := slices.Sorted(maps.Keys(schemes)); !slices.Equal(got, want) {
		out = append(out, fmt.Sprintf("Iam, Jwt: the security schemes are %v, want %v", got, want))
	}
	if iam := schemes["Iam"]; cfnAt(iam, "type") != "apiKey" || cfnAt(iam, "x-amazon-apigateway-authtype") != "awsSigv4" ||
		cfnAt(iam, "name") != "Authorization" || cfnAt(iam, "in") != "header" {
		out = append(out, fmt.Sprintf("Iam: %v, want API Gateway's IAM authorization (awsSigv4)", iam))
	}
	if jwt, ok := schemes["Jwt"]; ok {
		a := cfnAt(jwt, "x-amazon-apigateway-authorizer")
		if cfnAt(jwt, "type") != "oauth2" || cfnAt(a, "type") != "jwt" ||
			cfnAt(a, "identitySource") != "$request.header.Authorization" ||
			cfnAt(a, "jwtConfiguration", "issuer") != values["JwtIssuer"] ||
			fmt.Sprint(cfnAt(a, "jwtConfiguration", "audience")) != fmt.Sprint(values["JwtAudience"]) {
			out = append(out, fmt.Sprintf("Jwt: %v, want a jwt authorizer of JwtIssuer and JwtAudience", jwt))
		}
	}
	if cfnAt(body, "security") != nil {
		out = append(out, "security: the body has a root-level requirement; each route names its own")
	}
	iam := []any{map[string]any{"Iam": []any{}}}
	jwt := []any{map[string]any{"Jwt": toAnys(auth.Scopes)}}
	for _, r := range httpapi.Routes {
		op := cfnAt(body, "paths", r.Path, strings.ToLower(r.Method))
		if op == nil {
			continue // diffRoutes reports it
		}
		var want any
		switch {
		case r.Caller == httpapi.NodeCaller:
			want = iam
		case r.Caller == httpapi.PeopleCaller && authorizer == "JWT":
			want = jwt
		case r.Caller == httpapi.PeopleCaller:
			want = iam
		case r.Caller != httpapi.AnyoneCaller:
			out = append(out, fmt.Sprintf("%s: caller %q is none the template knows", r.Key(), r.Caller))
			continue
		}
		if got := cfnAt(op, "security"); !reflect.DeepEqual(got, want) {
			out = append(out, fmt.Sprintf("%s: security %v, want %v (a %s route in a %s stack)", r.Key(), got, want, r.Caller, authorizer))
		}
	}
	return out
}

// checkFunctionsKnowTheCallers: every function reads the settings that map callers to
// principals from the parameters, in either kind of stack: the node routes are IAM's in both,
// so a JWT stack needs the node role as much as an IAM one.
func checkFunctionsKnowTheCallers(t *testing.T, cfn map[string]any) {
	t.Helper()
	resources := cfnAt(cfn, "Resources").(map[string]any)
	for _, id := range resourcesOf(cfn, "AWS::Lambda::Function") {
		for env, param := range map[string]string{"IAM_NODE_ROLE": "IamNodeRole", "IAM_ADMIN_ROLE": "IamAdminRole", "JWT_ADMIN_GROUP": "JwtAdminGroup"} {
			if cfnAt(resources, id, "Properties", "Environment", "Variables", env, "Ref") != param {
				t.Errorf("%s: %s is not the %s parameter", id, env, param)
			}
		}
	}
}

// checkEachFunctionLogsInAsItsRole: once SAM has merged Globals into each function, the
// migrate function's login is the migrator's and it knows the application role's, and every
// other function's login is the application role's and it knows nothing of the migrator's.
func checkEachFunctionLogsInAsItsRole(t *testing.T, cfn map[string]any) {
	t.Helper()
	resources := cfnAt(cfn, "Resources").(map[string]any)
	migrator := map[string]string{"DATABASE_URL": "DatabaseUrl", "DB_SECRET_ARN": "DatabaseSecretArn", "DB_USER": "DatabaseUser",
		"DB_APP_USER": "DatabaseAppUser", "DB_APP_SECRET_ARN": "DatabaseAppSecretArn"}
	app := map[string]string{"DATABASE_URL": "DatabaseAppUrl", "DB_USER": "DatabaseAppUser"}
	for _, id := range resourcesOf(cfn, "AWS::Lambda::Function") {
		vars, _ := cfnAt(resources, id, "Properties", "Environment", "Variables").(map[string]any)
		want := app
		if id == "MigrateFunction" {
			want = migrator
		}
		for name, param := range want {
			if cfnAt(vars, name, "Ref") != param {
				t.Errorf("%s: %s is %v, not the %s parameter", id, name, vars[name], param)
			}
		}
		if id == "MigrateFunction" {
			continue
		}
		// Password mode's login, the application role's secret; none in the other modes.
		if fmt.Sprint(cfnAt(vars, "DB_SECRET_ARN", "Fn::If")) != "[AppUsesItsSecret map[Ref:DatabaseAppSecretArn] ]" {
			t.Errorf("%s: DB_SECRET_ARN is %v, not the application role's secret in password mode", id, vars["DB_SECRET_ARN"])
		}
		if _, ok := vars["DB_APP_SECRET_ARN"]; ok {
			t.Errorf("%s is given DB_APP_SECRET_ARN, which only the migrate function reads", id)
		}
	}
}

// checkMigrationComesFirst: the DatabaseSchema custom resource runs the migrate function's
// version of this deploy, and every other function waits for it.
func checkMigrationComesFirst(t *testing.T, cfn map[string]any, bus string) {
	t.Helper()
	resources := cfnAt(cfn, "Resources").(map[string]any)
	schema := cfnAt(resources, "DatabaseSchema", "Properties")
	if schema == nil {
		t.Fatal("no DatabaseSchema resource")
	}
	if token, _ := cfnAt(schema, "ServiceToken", "Fn::GetAtt").([]any); fmt.Sprint(token) != "[MigrateFunction Arn]" {
		t.Errorf("DatabaseSchema's ServiceToken is %v, want the migrate function", cfnAt(schema, "ServiceToken"))
	}
	version, _ := cfnAt(schema, "CodeVersion", "Ref").(string)
	if cfnAt(resources, version, "Type") != "AWS::Lambda::Version" ||
		cfnAt(resources, version, "Properties", "FunctionName", "Ref") != "MigrateFunction" {
		t.Errorf("DatabaseSchema's CodeVersion is %v, want a version of the migrate function", cfnAt(schema, "CodeVersion"))
	}
	// Naming another bus turns the outbox on or off in the migration: it must run again.
	if cfnAt(schema, "EventBusName", "Ref") != "EventBusName" {
		t.Errorf("DatabaseSchema does not run again when EventBusName (%q) changes", bus)
	}
	for _, id := range resourcesOf(cfn, "AWS::Lambda::Function") {
		if id == "MigrateFunction" {
			continue
		}
		deps := cfnAt(resources, id, "DependsOn")
		if deps != "DatabaseSchema" && !slices.Contains(toAnys(deps), any("DatabaseSchema")) {
			t.Errorf("%s does not depend on DatabaseSchema: it could switch to new code before the migration", id)
		}
	}
}

// toAnys is a list value as []any: a JSON list as it is, a []string item by item, anything
// else nil.
func toAnys(v any) []any {
	switch v := v.(type) {
	case []any:
		return v
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out
	}
	return nil
}

// What the stack's database parameters say reaches every function as the settings config reads:
// each function's environment, as SAM's transform leaves it and CloudFormation resolves it, is
// loaded by shared/config itself. A direct connection is not via the proxy (so its timeouts are
// sent at connect) and verifies the database by the CA bundle; the proxy's default is via it.
func TestTemplateSettingsReachTheConfig(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	bundle := filepath.Join(t.TempDir(), "rds-global-bundle.pem")
	if err := os.WriteFile(bundle, testCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		params   map[string]string
		viaProxy bool
		rootCert string
	}{
		{"password mode", passwordMode, true, ""},
		{"straight to the cluster", withParams(directMode, "DatabaseSslRootCert", bundle), false, bundle},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfn := transformed(t, c.params)
			values, err := parameterValues(tpl, c.params)
			if err != nil {
				t.Fatal(err)
			}
			conditions, _ := cfnAt(cfn, "Conditions").(map[string]any)
			resolve := cfnEval{params: values, conditions: conditions}
			for _, id := range resourcesOf(cfn, "AWS::Lambda::Function") {
				vars, err := resolve.eval(cfnAt(cfn, "Resources", id, "Properties", "Environment", "Variables"))
				if err != nil {
					t.Fatal(err)
				}
				env := map[string]string{"AWS_REGION": "eu-west-1"}
				for k, v := range vars.(map[string]any) {
					s, ok := v.(string)
					if ref, isRef := cfnAt(v, "Ref").(string); isRef && cfnAt(cfn, "Resources", ref, "Type") == "AWS::S3::Bucket" {
						// A bucket's Ref is the name CloudFormation gives it: the stack's, the
						// logical id's and a suffix, lower-cased.
						s, ok = "mediator-"+strings.ToLower(ref)+"-1a2b3c4d5e6f7", true
					}
					if !ok {
						t.Fatalf("%s: %s is %v, which CloudFormation does not resolve to a string here", id, k, v)
					}
					env[k] = s
				}
				cfg, err := config.Load(func(k string) string { return env[k] })
				if err != nil {
					t.Fatalf("%s: the functions would not start: %v", id, err)
				}
				if cfg.Logs.Bucket != "mediator-logbucket-1a2b3c4d5e6f7" || cfg.Logs.MaxBytesPerStep != 256<<20 ||
					cfg.Logs.TailBytes != 16<<20 || cfg.Logs.Flush != 2*time.Second {
					t.Errorf("%s: step logs %+v, want the LogBucket and the defaults", id, cfg.Logs)
				}
				// The console of an IAM stack points people to the CLI: it cannot sign SigV4.
				if id == "QueryFunction" && cfg.Console.SignIn != "iam" {
					t.Errorf("%s: the console signs in by %q, want iam", id, cfg.Console.SignIn)
				}
				if cfg.Database.ViaProxy != c.viaProxy || cfg.Database.SSLRootCert != c.rootCert {
					t.Errorf("%s: via proxy %t, root cert %q; want %t, %q", id, cfg.Database.ViaProxy, cfg.Database.SSLRootCert, c.viaProxy, c.rootCert)
				}
			}
		})
	}
}

// testCA is a self-signed CA certificate in PEM, the shape of a CA bundle.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

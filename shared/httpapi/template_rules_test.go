package httpapi_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mediator/shared/config"
)

// ruleFailures evaluates every assertion of template.yaml's Rules, as CloudFormation does
// before it creates a change set, and names the ones that fail ("Rule[i]").
func ruleFailures(tpl map[string]any, overrides map[string]string) ([]string, error) {
	values, err := parameterValues(tpl, overrides)
	if err != nil {
		return nil, err
	}
	e := cfnEval{params: values, strict: true}
	rules, _ := tpl["Rules"].(map[string]any)
	var failed []string
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		if cond := cfnAt(rules, name, "RuleCondition"); cond != nil {
			applies, err := e.eval(cond)
			if err != nil {
				return nil, fmt.Errorf("%s: RuleCondition: %w", name, err)
			}
			if applies != true {
				continue
			}
		}
		assertions, _ := cfnAt(rules, name, "Assertions").([]any)
		for i, a := range assertions {
			holds, err := e.eval(cfnAt(a, "Assert"))
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", name, i, err)
			}
			if _, ok := cfnAt(a, "AssertDescription").(string); !ok {
				return nil, fmt.Errorf("%s[%d] has no AssertDescription, the message a refused deploy shows", name, i)
			}
			if holds != true {
				failed = append(failed, fmt.Sprintf("%s[%d]", name, i))
			}
		}
	}
	return failed, nil
}

// withParams is base plus more, as a new map.
func withParams(base map[string]string, more ...string) map[string]string {
	out := maps.Clone(base)
	for i := 0; i+1 < len(more); i += 2 {
		out[more[i]] = more[i+1]
	}
	return out
}

// The parameter sets of the database stack's two modes, as README.md's commands give them.
var (
	vpcParams = map[string]string{
		"SubnetIds":        "subnet-0aaaaaaaaaaaaaaaa,subnet-0bbbbbbbbbbbbbbbb",
		"SecurityGroupIds": "sg-0123456789abcdef0",
		"DatabaseHost":     "mediator-db-proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
	}
	appSecret       = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mediator-db-app-GhIjKl"
	passwordMode    = withParams(vpcParams, "DatabaseSecretArn", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mediator-db-AbCdEf", "DatabaseAppSecretArn", appSecret)
	iamMode         = withParams(vpcParams, "DatabaseIamAuth", "true", "ProxyResourceId", "prx-0123456789abcdef0", "DatabaseAppSecretArn", appSecret)
	throwawayParams = map[string]string{"DatabaseUrl": "postgres://mediator:pw@db.example.com:5432/mediator", "DatabaseAppUrl": "postgres://mediator_app:pw@db.example.com:5432/mediator"}
	// rdsBundle is where the build puts RDS's CA bundle in every function (Makefile, RDS_CA_BUNDLE).
	rdsBundle  = "/var/task/rds-global-bundle.pem"
	directMode = withParams(passwordMode, "DatabaseViaProxy", "false", "DatabaseSslRootCert", rdsBundle,
		"DatabaseHost", "mediator-db-cluster.cluster-abc.eu-west-1.rds.amazonaws.com")
	jwtParams = []string{"AuthorizerType", "JWT", "JwtIssuer", "https://issuer.example.com", "JwtAudience", "client-1"}
)

// Each rule refuses the combinations it names and accepts the ones a deploy uses.
func TestTemplateRulesRefuseWhatCannotWork(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	cases := []struct {
		name      string
		overrides map[string]string
		fail      []string
	}{
		{"password mode", passwordMode, nil},
		{"IAM auth", iamMode, nil},
		{"a throwaway database by URL, outside any VPC", throwawayParams, nil},
		{"password mode behind JWT", withParams(passwordMode, jwtParams...), nil},
		{"IAM auth behind JWT", withParams(iamMode, jwtParams...), nil},

		{"no database at all", map[string]string{}, []string{"ExactlyOneDatabaseLogin[0]"}},
		// Every function but migrate logs in as the application role: it needs a login too.
		{"a URL without the application role's", withParams(throwawayParams, "DatabaseAppUrl", ""), []string{"TheApplicationHasALoginOfItsOwn[0]"}},
		{"the application role's URL alone", map[string]string{"DatabaseAppUrl": throwawayParams["DatabaseAppUrl"]},
			[]string{"ExactlyOneDatabaseLogin[0]", "TheApplicationHasALoginOfItsOwn[0]"}},
		{"the application role's URL beside the secret", withParams(passwordMode, "DatabaseAppUrl", throwawayParams["DatabaseAppUrl"]), []string{"TheApplicationHasALoginOfItsOwn[0]"}},
		{"the secret without the application role's", withParams(passwordMode, "DatabaseAppSecretArn", ""), []string{"TheApplicationHasALoginOfItsOwn[1]"}},
		{"IAM auth without the application role's secret", withParams(iamMode, "DatabaseAppSecretArn", ""), []string{"TheApplicationHasALoginOfItsOwn[1]"}},
		{"a URL with the application role's secret", withParams(throwawayParams, "DatabaseAppSecretArn", appSecret), []string{"TheApplicationHasALoginOfItsOwn[1]"}},
		{"no database, in a VPC", vpcParams, []string{"ExactlyOneDatabaseLogin[0]"}},
		{"the secret and IAM auth", withParams(iamMode, "DatabaseSecretArn", passwordMode["DatabaseSecretArn"]), []string{"ExactlyOneDatabaseLogin[0]"}},
		{"a URL and the secret", withParams(passwordMode, "DatabaseUrl", throwawayParams["DatabaseUrl"]),
			[]string{"ExactlyOneDatabaseLogin[0]", "TheApplicationHasALoginOfItsOwn[0]"}},
		{"a URL and IAM auth", withParams(iamMode, "DatabaseUrl", throwawayParams["DatabaseUrl"]),
			[]string{"ExactlyOneDatabaseLogin[0]", "TheApplicationHasALoginOfItsOwn[0]"}},
		{"all three", withParams(iamMode, "DatabaseUrl", throwawayParams["DatabaseUrl"], "DatabaseSecretArn", passwordMode["DatabaseSecretArn"]),
			[]string{"ExactlyOneDatabaseLogin[0]", "TheApplicationHasALoginOfItsOwn[0]"}},
		{"IAM auth without the proxy's id", withParams(iamMode, "ProxyResourceId", ""), []string{"IamAuthNeedsTheProxy[0]"}},
		{"IAM auth without the proxy's host", withParams(iamMode, "DatabaseHost", ""), []string{"IamAuthNeedsTheProxy[1]"}},
		{"IAM auth with neither", withParams(iamMode, "DatabaseHost", "", "ProxyResourceId", ""),
			[]string{"IamAuthNeedsTheProxy[0]", "IamAuthNeedsTheProxy[1]"}},
		{"JWT without an issuer", withParams(passwordMode, "AuthorizerType", "JWT", "JwtAudience", "client-1"), []string{"JwtNeedsAnIssuer[0]"}},
		{"JWT without an audience", withParams(passwordMode, "AuthorizerType", "JWT", "JwtIssuer", "https://issuer.example.com"), []string{"JwtNeedsAnIssuer[1]"}},
		{"an issuer while IAM authorizes", withParams(passwordMode, "JwtIssuer", "https://issuer.example.com"), nil},
		{"JWT with an admin group", withParams(passwordMode, append(slices.Clone(jwtParams), "JwtAdminGroup", "mediator-admins")...), nil},
		{"an admin group while IAM authorizes", withParams(passwordMode, "JwtAdminGroup", "mediator-admins"), nil},
		// Nodes sign with IAM in every stack: without the node role no caller is a node.
		{"JWT without the node role", withParams(passwordMode, append(slices.Clone(jwtParams), "IamNodeRole", "")...), []string{"NodesSignAsTheNodeRole[0]"}},
		{"IAM without the node role", withParams(passwordMode, "IamNodeRole", ""), []string{"NodesSignAsTheNodeRole[0]"}},
		// Direct connections: the database's certificate is the RDS CA's, not one the system trusts.
		{"password mode, straight to the cluster with RDS's bundle", directMode, nil},
		{"straight to the cluster on the system's CAs", withParams(directMode, "DatabaseSslRootCert", ""), []string{"DirectConnectionsTrustTheRdsCa[0]"}},
		{"IAM auth straight to the cluster", withParams(iamMode, "DatabaseViaProxy", "false", "DatabaseSslRootCert", rdsBundle),
			[]string{"IamAuthNeedsTheProxy[2]"}},
		{"IAM auth straight to the cluster on the system's CAs", withParams(iamMode, "DatabaseViaProxy", "false"),
			[]string{"DirectConnectionsTrustTheRdsCa[0]", "IamAuthNeedsTheProxy[2]"}},
		{"the proxy with a bundle of one's own", withParams(passwordMode, "DatabaseSslRootCert", rdsBundle), nil},
		{"a throwaway database by URL, directly", withParams(throwawayParams, "DatabaseViaProxy", "false"), nil},
		{"a URL and a root certificate", withParams(throwawayParams, "DatabaseSslRootCert", rdsBundle), []string{"ARootCertIsForTheSecretOrIam[0]"}},
		// The node routes' throttle table is the default TTL's: another cadence needs its own.
		{"10,000 nodes", withParams(passwordMode, "FleetSize", "10000"), nil},
		{"a 30 s TTL without the node throttle", withParams(passwordMode, "LeaseTtlSeconds", "30"),
			[]string{"NodeThrottleFollowsTheCadence[0]", "NodeThrottleFollowsTheCadence[1]"}},
		{"a 30 s TTL with the node throttle", withParams(passwordMode, "LeaseTtlSeconds", "30", "NodeRateLimit", "400", "NodeBurstLimit", "800"), nil},
		{"a 30 s TTL with a node rate alone", withParams(passwordMode, "LeaseTtlSeconds", "30", "NodeRateLimit", "400"),
			[]string{"NodeThrottleFollowsTheCadence[1]", "NodeThrottleGivenWhole[0]"}},
		{"a node burst alone", withParams(passwordMode, "NodeBurstLimit", "800"), []string{"NodeThrottleGivenWhole[0]"}},
		{"subnets without security groups", withParams(passwordMode, "SecurityGroupIds", ""), []string{"SubnetsComeWithSecurityGroups[0]"}},
		{"security groups without subnets", withParams(passwordMode, "SubnetIds", ""), []string{"SubnetsComeWithSecurityGroups[0]"}},
	}
	refused := map[string]bool{}
	for _, c := range cases {
		for name, value := range c.overrides {
			if value == "" {
				continue
			}
			if err := checkParameter(tpl, name, value); err != nil {
				t.Errorf("%s: CloudFormation would refuse the value itself: %v", c.name, err)
			}
		}
		failed, err := ruleFailures(tpl, c.overrides)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(failed, c.fail) {
			t.Errorf("%s: the rules refuse %v, want %v", c.name, failed, c.fail)
		}
		for _, f := range failed {
			refused[f] = true
		}
	}
	// Every assertion is one some case above sees refuse: none is unreachable or untested.
	rules, _ := tpl["Rules"].(map[string]any)
	if len(rules) == 0 {
		t.Fatal("template.yaml has no Rules")
	}
	for name := range rules {
		assertions, _ := cfnAt(rules, name, "Assertions").([]any)
		for i := range assertions {
			if id := fmt.Sprintf("%s[%d]", name, i); !refused[id] {
				t.Errorf("no case is refused by %s", id)
			}
		}
	}
}

// JwtAdminGroup allows what JWT_ADMIN_GROUP does (config.AdminGroupPattern), and nothing else:
// a group the template accepted and the functions refused would deploy functions that cannot
// start.
func TestTemplateAdminGroupIsTheConfigs(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	if got, want := cfnAt(tpl, "Parameters", "JwtAdminGroup", "AllowedPattern"), "^$|"+config.AdminGroupPattern; got != want {
		t.Errorf("JwtAdminGroup's AllowedPattern is %v, want %s", got, want)
	}
	for _, name := range []string{"mediator-admins", "Admins", "ops@lab"} {
		if err := checkParameter(tpl, "JwtAdminGroup", name); err != nil {
			t.Error(err)
		}
	}
	if err := checkParameter(tpl, "JwtAdminGroup", "mediator admins"); err == nil {
		t.Error("JwtAdminGroup accepts a name with a space, which no list API Gateway writes could hold")
	}
}

// DatabaseAppUser allows the role names the functions do (config.RolePattern), and defaults to
// the role they grant to unless told: a name the template accepted and the migrate function
// refused would deploy a stack that cannot migrate.
func TestTemplateAppUserIsTheConfigs(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	if got := cfnAt(tpl, "Parameters", "DatabaseAppUser", "AllowedPattern"); got != config.RolePattern {
		t.Errorf("DatabaseAppUser's AllowedPattern is %v, want %s", got, config.RolePattern)
	}
	if got := cfnAt(tpl, "Parameters", "DatabaseAppUser", "Default"); got != config.DefaultAppUser {
		t.Errorf("DatabaseAppUser's default is %v, want %s", got, config.DefaultAppUser)
	}
	if err := checkParameter(tpl, "DatabaseAppUser", `mediator_app"; DROP ROLE mediator; --`); err == nil {
		t.Error("DatabaseAppUser accepts a name that is no plain role name")
	}
}

// samconfigOverrides reads the parameter_overrides list of each environment of samconfig.toml
// ("[<env>.deploy.parameters]"): the file's own shape, not TOML in general.
func samconfigOverrides(t *testing.T) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../samconfig.toml")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?m)^\[(\w+)\.deploy\.parameters\]$`)
	list := regexp.MustCompile(`(?s)\nparameter_overrides = \[(.*?)\n\]`)
	item := regexp.MustCompile(`"(\w+)=([^"]*)"`)
	envs := map[string]map[string]string{}
	text := string(raw)
	locs := section.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if next := strings.Index(text[loc[1]:end], "\n["); next >= 0 {
			end = loc[1] + next
		}
		m := list.FindStringSubmatch(text[loc[1]:end])
		if m == nil {
			t.Fatalf("samconfig.toml: [%s.deploy.parameters] has no parameter_overrides list", text[loc[2]:loc[3]])
		}
		values := map[string]string{}
		for _, kv := range item.FindAllStringSubmatch(m[1], -1) {
			values[kv[1]] = kv[2]
		}
		envs[text[loc[2]:loc[3]]] = values
	}
	return envs
}

// samconfig.toml's environments are the two modes with placeholders where the database
// stack's outputs go: unedited, CloudFormation refuses a value before it changes anything;
// filled in, every rule holds.
func TestTemplateSamconfigModes(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	envs := samconfigOverrides(t)
	want := map[string]map[string]string{"default": passwordMode, "iam": iamMode}
	if len(envs) != len(want) {
		t.Fatalf("samconfig.toml has environments %v, want %v", slices.Sorted(maps.Keys(envs)), slices.Sorted(maps.Keys(want)))
	}
	for env, mode := range want {
		overrides, ok := envs[env]
		if !ok {
			t.Errorf("samconfig.toml has no [%s.deploy.parameters]", env)
			continue
		}
		var refused []string
		filled := map[string]string{}
		for name, value := range overrides {
			if err := checkParameter(tpl, name, value); err != nil {
				refused = append(refused, name)
			}
			filled[name] = value
			if strings.HasPrefix(value, "REPLACE") {
				real, ok := mode[name]
				if !ok {
					t.Errorf("[%s] %s is a placeholder this test has no value for", env, name)
				}
				filled[name] = real
			}
		}
		if len(refused) == 0 {
			t.Errorf("[%s]: unedited, CloudFormation would accept every value; a placeholder should be refused", env)
		}
		for name := range mode {
			if _, ok := overrides[name]; !ok {
				t.Errorf("[%s] does not set %s", env, name)
			}
		}
		failed, err := ruleFailures(tpl, filled)
		if err != nil {
			t.Fatalf("[%s]: %v", env, err)
		}
		if len(failed) > 0 {
			t.Errorf("[%s], filled in: the rules refuse %v", env, failed)
		}
	}
}

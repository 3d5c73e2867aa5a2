package infra_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"mediator/localdev/testdb"
	"mediator/shared/config"
)

// The template is read as a yaml.Node tree: CloudFormation's short forms (!Ref, !GetAtt, !Sub,
// ...) are custom tags that a node keeps and a decode into map[string]any would not.

func loadTemplate(t *testing.T) *yaml.Node { return loadFile(t, "database.yaml") }

// loadFile reads one of the templates (database.yaml, access.yaml, ../template.yaml).
func loadFile(t *testing.T, name string) *yaml.Node {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("%s is not one YAML mapping", name)
	}
	return doc.Content[0]
}

// get is the value under key in a mapping node, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// path follows keys down through nested mappings.
func path(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		n = get(n, k)
	}
	return n
}

// keys are a mapping node's keys, in order.
func keys(m *yaml.Node) []string {
	var ks []string
	if m != nil && m.Kind == yaml.MappingNode {
		for i := 0; i < len(m.Content); i += 2 {
			ks = append(ks, m.Content[i].Value)
		}
	}
	return ks
}

// walk calls fn on n and every node below it.
func walk(n *yaml.Node, fn func(*yaml.Node)) {
	if n == nil {
		return
	}
	fn(n)
	for _, c := range n.Content {
		walk(c, fn)
	}
}

// resourcesOfType are the logical ids of the resources of one type.
func resourcesOfType(tmpl *yaml.Node, typ string) []string {
	var ids []string
	res := get(tmpl, "Resources")
	for _, id := range keys(res) {
		if t := path(res, id, "Type"); t != nil && t.Value == typ {
			ids = append(ids, id)
		}
	}
	return ids
}

// refTarget is the logical id a !Ref, !GetAtt or Ref/Fn::GetAtt node names, if n is one.
func refTarget(n *yaml.Node) (string, bool) {
	switch n.Tag {
	case "!Ref":
		return n.Value, true
	case "!GetAtt":
		if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
			return n.Content[0].Value, true
		}
		return strings.SplitN(n.Value, ".", 2)[0], true
	}
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 {
		switch v := n.Content[1]; n.Content[0].Value {
		case "Ref":
			return v.Value, true
		case "Fn::GetAtt":
			if v.Kind == yaml.SequenceNode && len(v.Content) > 0 {
				return v.Content[0].Value, true
			}
			return strings.SplitN(v.Value, ".", 2)[0], true
		}
	}
	return "", false
}

var subVar = regexp.MustCompile(`\$\{([^!}][^}]*)\}`)

// subTargets are the names a !Sub string uses (${Name} or ${Name.Attr}; ${!x} is literal),
// less those the !Sub defines itself in its variable map.
func subTargets(n *yaml.Node) []string {
	var str, vars *yaml.Node
	switch {
	case n.Tag == "!Sub" && n.Kind == yaml.ScalarNode:
		str = n
	case n.Tag == "!Sub" && n.Kind == yaml.SequenceNode && len(n.Content) > 0:
		str = n.Content[0]
		if len(n.Content) > 1 {
			vars = n.Content[1]
		}
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "Fn::Sub":
		return subTargets(&yaml.Node{Kind: n.Content[1].Kind, Tag: "!Sub", Value: n.Content[1].Value, Content: n.Content[1].Content})
	default:
		return nil
	}
	var names []string
	for _, m := range subVar.FindAllStringSubmatch(str.Value, -1) {
		name := strings.SplitN(m[1], ".", 2)[0]
		if get(vars, name) == nil {
			names = append(names, name)
		}
	}
	return names
}

// conditionUses are the condition names a resource's Condition key or an !If names.
func conditionUses(tmpl *yaml.Node) []string {
	var names []string
	res := get(tmpl, "Resources")
	for _, id := range keys(res) {
		if c := path(res, id, "Condition"); c != nil {
			names = append(names, c.Value)
		}
	}
	walk(tmpl, func(n *yaml.Node) {
		if n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3 {
			names = append(names, n.Content[0].Value)
		}
	})
	return names
}

func TestTemplateHasTheDatabaseResources(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	for _, typ := range []string{
		"AWS::RDS::DBCluster",
		"AWS::RDS::DBInstance",
		"AWS::RDS::DBProxy",
		"AWS::RDS::DBProxyTargetGroup",
		"AWS::SecretsManager::Secret",
		"AWS::SecretsManager::SecretTargetAttachment",
	} {
		if len(resourcesOfType(tmpl, typ)) == 0 {
			t.Errorf("no %s resource", typ)
		}
	}
	if n := len(resourcesOfType(tmpl, "AWS::EC2::SecurityGroup")); n < 3 {
		t.Errorf("%d security groups, want at least 3 (functions, proxy, database)", n)
	}
	if get(tmpl, "Transform") != nil {
		t.Error("the template has a Transform; it is meant to be plain CloudFormation")
	}
}

func TestEveryReferenceNamesSomethingInTheTemplate(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"database.yaml", "access.yaml"} {
		t.Run(name, func(t *testing.T) { everyReferenceResolves(t, loadFile(t, name)) })
	}
}

func everyReferenceResolves(t *testing.T, tmpl *yaml.Node) {
	known := map[string]bool{}
	for _, section := range []string{"Parameters", "Resources"} {
		for _, k := range keys(get(tmpl, section)) {
			known[k] = true
		}
	}
	exists := func(name string) bool { return known[name] || strings.HasPrefix(name, "AWS::") }

	refs := 0
	walk(tmpl, func(n *yaml.Node) {
		if target, ok := refTarget(n); ok {
			refs++
			if !exists(target) {
				t.Errorf("line %d: a reference to %q, which is no parameter or resource", n.Line, target)
			}
		}
		for _, target := range subTargets(n) {
			refs++
			if !exists(target) {
				t.Errorf("line %d: !Sub uses ${%s}, which is no parameter or resource", n.Line, target)
			}
		}
	})
	if refs == 0 {
		t.Fatal("found no references at all; the walk is broken")
	}

	conditions := keys(get(tmpl, "Conditions"))
	for _, c := range conditionUses(tmpl) {
		if !slices.Contains(conditions, c) {
			t.Errorf("condition %q is used but not defined", c)
		}
	}
}

func TestOutputsTheSAMStackNeeds(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	outputs := get(tmpl, "Outputs")
	for _, name := range []string{
		"ProxyEndpoint", "DatabaseName", "SecretArn", "AppSecretArn", "FunctionSecurityGroupId",
		"PrivateSubnetIds", "ProxyArn", "DbUser", "AppDbUser", "ProxyResourceId",
	} {
		out := get(outputs, name)
		if out == nil {
			t.Errorf("no output %s", name)
			continue
		}
		if get(out, "Value") == nil {
			t.Errorf("output %s has no Value", name)
		}
		export := path(out, "Export", "Name")
		if export == nil || export.Tag != "!Sub" || !strings.HasPrefix(export.Value, "${AWS::StackName}") {
			t.Errorf("output %s: want an export named !Sub \"${AWS::StackName}-...\"", name)
		}
	}

	// The proxy's resource id is the last part of its ARN, arn:aws:rds:REGION:ACCOUNT:db-proxy:prx-...
	v := path(outputs, "ProxyResourceId", "Value")
	if v == nil || v.Tag != "!Select" || len(v.Content) != 2 || v.Content[0].Value != "6" {
		t.Fatal(`ProxyResourceId: want !Select [6, !Split [":", !GetAtt <proxy>.DBProxyArn]]`)
	}
	split := v.Content[1]
	if split.Tag != "!Split" || len(split.Content) != 2 || split.Content[0].Value != ":" ||
		split.Content[1].Tag != "!GetAtt" || !strings.HasSuffix(split.Content[1].Value, ".DBProxyArn") {
		t.Fatal(`ProxyResourceId: want !Split [":", !GetAtt <proxy>.DBProxyArn] inside the !Select`)
	}
	if target, _ := refTarget(split.Content[1]); !slices.Contains(resourcesOfType(tmpl, "AWS::RDS::DBProxy"), target) {
		t.Errorf("ProxyResourceId splits the ARN of %q, which is not a DB proxy", target)
	}
}

// openCIDRs are the "anywhere" ranges no rule of this stack should name.
var openCIDRs = []string{"0.0.0.0/0", "::/0"}

func TestNothingIsOpenToTheWorld(t *testing.T) {
	t.Parallel()
	walk(loadTemplate(t), func(n *yaml.Node) {
		for _, k := range []string{"CidrIp", "CidrIpv6"} {
			if v := get(n, k); v != nil && slices.Contains(openCIDRs, v.Value) {
				t.Errorf("line %d: %s %s", v.Line, k, v.Value)
			}
		}
	})
}

// The database's security group admits PostgreSQL from the proxy's group and nothing else,
// unless the stack is deployed with DirectConnections=true: then from the functions' group too,
// and both sides of that path exist only under that parameter.
func TestOnlyTheProxyReachesTheDatabase(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	res := get(tmpl, "Resources")
	groupsOf := func(typ string) []string {
		var groups []string
		for _, id := range resourcesOfType(tmpl, typ) {
			if list := path(res, id, "Properties", "VpcSecurityGroupIds"); list != nil {
				for _, g := range list.Content {
					if target, ok := refTarget(g); ok {
						groups = append(groups, target)
					}
				}
			}
		}
		return groups
	}
	dbGroups, proxyGroups := groupsOf("AWS::RDS::DBCluster"), groupsOf("AWS::RDS::DBProxy")
	if len(dbGroups) == 0 || len(proxyGroups) == 0 {
		t.Fatalf("cluster groups %v, proxy groups %v: want security groups on both", dbGroups, proxyGroups)
	}

	// Every ingress rule on a database group: inline ones and separate resources.
	type rule struct {
		where, condition string
		node             *yaml.Node
	}
	var rules []rule
	for _, g := range dbGroups {
		if inline := path(res, g, "Properties", "SecurityGroupIngress"); inline != nil {
			for _, r := range inline.Content {
				rules = append(rules, rule{g, "", r})
			}
		}
	}
	for _, id := range resourcesOfType(tmpl, "AWS::EC2::SecurityGroupIngress") {
		props := path(res, id, "Properties")
		if target, _ := refTarget(get(props, "GroupId")); slices.Contains(dbGroups, target) {
			cond := ""
			if c := path(res, id, "Condition"); c != nil {
				cond = c.Value
			}
			rules = append(rules, rule{id, cond, props})
		}
	}
	if len(rules) == 0 {
		t.Fatal("the database's security group admits nothing; the proxy could not connect")
	}
	direct := onlyWithDirectConnections(t, tmpl)
	fromFunctions := 0
	for _, r := range rules {
		src := get(r.node, "SourceSecurityGroupId")
		target, ok := "", false
		if src != nil {
			target, ok = refTarget(src)
		}
		switch {
		case ok && slices.Contains(proxyGroups, target):
		case ok && target == "FunctionSecurityGroup" && r.condition == direct:
			fromFunctions++
		case ok && target == "FunctionSecurityGroup":
			t.Errorf("%s: ingress to the database from the functions without DirectConnections=true", r.where)
		default:
			t.Errorf("%s: ingress to the database from something other than the proxy's group", r.where)
		}
		for _, k := range []string{"CidrIp", "CidrIpv6", "SourcePrefixListId"} {
			if get(r.node, k) != nil {
				t.Errorf("%s: ingress to the database by %s", r.where, k)
			}
		}
		for _, k := range []string{"FromPort", "ToPort"} {
			if v := get(r.node, k); v == nil || v.Value != "5432" {
				t.Errorf("%s: %s is not 5432", r.where, k)
			}
		}
	}
	if fromFunctions != 1 {
		t.Errorf("%d ingress rules from the functions under DirectConnections, want one", fromFunctions)
	}
}

// onlyWithDirectConnections is the condition that is true exactly when the stack is deployed
// with DirectConnections=true, a parameter false by default.
func onlyWithDirectConnections(t *testing.T, tmpl *yaml.Node) string {
	t.Helper()
	if d := path(tmpl, "Parameters", "DirectConnections", "Default"); d == nil || d.Value != "false" {
		t.Fatal(`DirectConnections: want a parameter that defaults to "false"`)
	}
	for _, name := range keys(get(tmpl, "Conditions")) {
		c := path(tmpl, "Conditions", name)
		if c.Tag == "!Equals" && len(c.Content) == 2 && c.Content[0].Tag == "!Ref" &&
			c.Content[0].Value == "DirectConnections" && c.Content[1].Value == "true" {
			return name
		}
	}
	t.Fatal(`no condition !Equals [!Ref DirectConnections, "true"]`)
	return ""
}

// With DirectConnections=true the functions may reach the cluster on 5432, both ways round (the
// functions' egress, the database's ingress), and the stack outputs the endpoint to use.
func TestDirectConnectionsOpenOnePath(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	res := get(tmpl, "Resources")
	direct := onlyWithDirectConnections(t, tmpl)
	var egress []string
	for _, id := range resourcesOfType(tmpl, "AWS::EC2::SecurityGroupEgress") {
		props := path(res, id, "Properties")
		dest := get(props, "DestinationSecurityGroupId")
		if dest == nil {
			continue // to a prefix list (S3)
		}
		from, _ := refTarget(get(props, "GroupId"))
		to, _ := refTarget(dest)
		if from != "FunctionSecurityGroup" || to != "DatabaseSecurityGroup" {
			continue
		}
		egress = append(egress, id)
		if c := path(res, id, "Condition"); c == nil || c.Value != direct {
			t.Errorf("%s: the functions' egress to the database without DirectConnections=true", id)
		}
		if get(props, "FromPort").Value != "5432" || get(props, "ToPort").Value != "5432" {
			t.Errorf("%s: not PostgreSQL's port alone", id)
		}
	}
	if len(egress) != 1 {
		t.Errorf("the functions' egress rules to the database: %v, want one", egress)
	}
	if v := path(tmpl, "Outputs", "ClusterEndpoint", "Value"); v == nil || v.Tag != "!GetAtt" || v.Value != "DatabaseCluster.Endpoint.Address" {
		t.Error("no ClusterEndpoint output: the writer endpoint a direct connection's DatabaseHost names")
	}
}

func TestProxyRequiresTLSAndSpeaksPostgreSQL(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	for _, id := range resourcesOfType(tmpl, "AWS::RDS::DBProxy") {
		props := path(get(tmpl, "Resources"), id, "Properties")
		if v := get(props, "EngineFamily"); v == nil || v.Value != "POSTGRESQL" {
			t.Errorf("%s: EngineFamily is not POSTGRESQL", id)
		}
		if v := get(props, "RequireTLS"); v == nil || v.Value != "true" {
			t.Errorf("%s: RequireTLS is not true", id)
		}
	}
}

// Each role's secret is a login of the proxy: in its Auth list, readable by its role, and by
// the functions through the Secrets Manager endpoint. The migrator's is the master login's;
// the application role's username is AppUser, a role name the functions accept, by default
// the one they grant to.
func TestTheProxyLogsInEachRole(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	res := get(tmpl, "Resources")
	secrets := resourcesOfType(tmpl, "AWS::SecretsManager::Secret")
	if !slices.Equal(secrets, []string{"DatabaseSecret", "AppSecret"}) {
		t.Fatalf("secrets %v, want the master's and the application role's", secrets)
	}
	refs := func(n *yaml.Node) []string {
		var ids []string
		walk(n, func(n *yaml.Node) {
			if id, ok := refTarget(n); ok {
				ids = append(ids, id)
			}
		})
		return ids
	}
	var auth []string
	for _, a := range path(res, "DatabaseProxy", "Properties", "Auth").Content {
		auth = append(auth, refs(get(a, "SecretArn"))...)
		if v := get(a, "IAMAuth"); v == nil || v.Tag != "!Ref" || v.Value != "ProxyIamAuth" {
			t.Errorf("an Auth entry's IAMAuth is not ProxyIamAuth: every login takes the same mode")
		}
	}
	for where, got := range map[string][]string{
		"the proxy's Auth list":        auth,
		"the proxy's role":             refs(path(res, "ProxyRole", "Properties", "Policies")),
		"the Secrets Manager endpoint": refs(path(res, "SecretsManagerEndpoint", "Properties", "PolicyDocument")),
	} {
		for _, secret := range secrets {
			if !slices.Contains(got, secret) {
				t.Errorf("%s leaves out %s", where, secret)
			}
		}
	}
	master := path(res, "DatabaseCluster", "Properties", "MasterUsername")
	if master == nil || !strings.Contains(master.Value, "${DatabaseSecret}") {
		t.Errorf("the master login is not DatabaseSecret's: %v", master)
	}
	user := path(tmpl, "Parameters", "AppUser")
	if v := get(user, "AllowedPattern"); v == nil || v.Value != config.RolePattern {
		t.Errorf("AppUser's AllowedPattern is not config.RolePattern %s", config.RolePattern)
	}
	if v := get(user, "Default"); v == nil || v.Value != config.DefaultAppUser {
		t.Errorf("AppUser's default is not %s, the role the migrate function grants to unless told", config.DefaultAppUser)
	}
	tpl := path(res, "AppSecret", "Properties", "GenerateSecretString", "SecretStringTemplate")
	if tpl == nil || !strings.Contains(tpl.Value, `"username":"${AppUser}"`) {
		t.Errorf("AppSecret's username is not AppUser: %v", tpl)
	}
	for _, id := range []string{"DatabaseSecretAttachment", "AppSecretAttachment"} {
		if path(res, id, "Type") == nil || path(res, id, "Type").Value != "AWS::SecretsManager::SecretTargetAttachment" {
			t.Errorf("no %s: the secret would lack the host and port of the RDS shape", id)
		}
	}
}

// The proxy runs ProxyInitQuery's default on every connection it opens: it must be SQL that
// PostgreSQL takes, and it must set the timeouts the functions' request deadline is built from
// (shared/config's defaults). Run here, on a real server, as the proxy would.
func TestProxyInitQueryDefaultRunsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	query := path(loadTemplate(t), "Parameters", "ProxyInitQuery", "Default").Value
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Simple protocol: one string of several statements, as the proxy sends it.
	if _, err := conn.PgConn().Exec(ctx, query).ReadAll(); err != nil {
		t.Fatalf("ProxyInitQuery's default %q fails on PostgreSQL: %v", query, err)
	}
	for name, want := range map[string]int{
		"statement_timeout":                   config.DefaultStatementTimeoutMS,
		"lock_timeout":                        config.DefaultLockTimeoutMS,
		"idle_in_transaction_session_timeout": config.DefaultIdleInTxTimeoutMS,
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != strconv.Itoa(want)+"ms" && got != strconv.Itoa(want/1000)+"s" {
			t.Errorf("after ProxyInitQuery, %s = %s; the functions assume %d ms", name, got, want)
		}
	}
	var jit string
	if err := conn.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&jit); err != nil || jit != "off" {
		t.Errorf("after ProxyInitQuery, jit = %s (%v); the functions' direct connections turn it off", jit, err)
	}
}

// The migrate function answers each deploy at a pre-signed S3 URL: the functions' group lets
// HTTPS out to S3's addresses only, and the stack can give the private subnets a route there.
func TestTheFunctionsReachS3(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	res := get(tmpl, "Resources")
	var egress []string
	for _, id := range resourcesOfType(tmpl, "AWS::EC2::SecurityGroupEgress") {
		props := path(res, id, "Properties")
		if target, _ := refTarget(get(props, "GroupId")); target != "FunctionSecurityGroup" {
			continue
		}
		if pl := get(props, "DestinationPrefixListId"); pl != nil {
			if target, _ := refTarget(pl); target != "S3PrefixListId" || get(props, "FromPort").Value != "443" ||
				get(props, "ToPort").Value != "443" || path(res, id, "Condition") != nil {
				t.Errorf("%s: want HTTPS to the S3 prefix list, unconditionally", id)
			}
			egress = append(egress, id)
		}
	}
	if len(egress) != 1 {
		t.Errorf("egress rules of the functions' group to a prefix list: %v, want one, to S3", egress)
	}
	if p := path(tmpl, "Parameters", "S3PrefixListId"); p == nil || get(p, "Default") != nil {
		t.Error("S3PrefixListId: want a parameter without a default (a deploy cannot answer without it)")
	}
	var gateways []string
	for _, id := range resourcesOfType(tmpl, "AWS::EC2::VPCEndpoint") {
		props := path(res, id, "Properties")
		if v := get(props, "VpcEndpointType"); v == nil || v.Value != "Gateway" {
			continue
		}
		gateways = append(gateways, id)
		if sub := get(props, "ServiceName"); sub == nil || sub.Value != "com.amazonaws.${AWS::Region}.s3" {
			t.Errorf("%s: not the S3 service", id)
		}
		if target, _ := refTarget(get(props, "RouteTableIds")); target != "RouteTableIds" {
			t.Errorf("%s: not on the RouteTableIds parameter's route tables", id)
		}
		if path(res, id, "Condition") == nil {
			t.Errorf("%s: unconditional; a VPC with its own S3 endpoint or a NAT needs none", id)
		}
	}
	if len(gateways) != 1 {
		t.Errorf("S3 gateway endpoints: %v, want one", gateways)
	}
}

// A request waits for a pooled connection no longer than its own deadline, which ends before
// the function's timeout: the proxy's wait, the request's and the function's agree.
func TestBorrowTimeoutEndsBeforeTheRequest(t *testing.T) {
	t.Parallel()
	var borrow time.Duration
	for _, id := range resourcesOfType(loadTemplate(t), "AWS::RDS::DBProxyTargetGroup") {
		v := path(get(loadTemplate(t), "Resources"), id, "Properties", "ConnectionPoolConfigurationInfo", "ConnectionBorrowTimeout")
		s, err := strconv.Atoi(v.Value)
		if err != nil {
			t.Fatalf("%s: ConnectionBorrowTimeout %q", id, v.Value)
		}
		borrow = time.Duration(s) * time.Second
	}
	cfg, err := config.Load(func(k string) string {
		if k == "DB_SECRET_ARN" {
			return "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := cfg.Database.RequestDeadline()
	timeout := path(loadFile(t, "../template.yaml"), "Globals", "Function", "Timeout")
	s, err := strconv.Atoi(timeout.Value)
	if err != nil {
		t.Fatalf("template.yaml: Globals.Function.Timeout %q", timeout.Value)
	}
	function := time.Duration(s) * time.Second
	if borrow <= 0 || borrow > deadline || deadline >= function {
		t.Errorf("borrow timeout %v, request deadline %v, function timeout %v: want 0 < borrow <= deadline < timeout",
			borrow, deadline, function)
	}
}

// The proxy's share of max_connections is the operator's to lower (more transactions at once
// than the writer has cores for only lengthen the tail), and never leaves an operator's session
// without a slot.
func TestTheProxysShareOfConnectionsIsAParameterBelowTheWhole(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	for _, id := range resourcesOfType(tmpl, "AWS::RDS::DBProxyTargetGroup") {
		v := path(get(tmpl, "Resources"), id, "Properties", "ConnectionPoolConfigurationInfo", "MaxConnectionsPercent")
		if name, ok := refTarget(v); !ok || name != "ProxyMaxConnectionsPercent" {
			t.Errorf("%s: MaxConnectionsPercent is not the ProxyMaxConnectionsPercent parameter", id)
		}
	}
	p := path(tmpl, "Parameters", "ProxyMaxConnectionsPercent")
	for key, want := range map[string]string{"Default": "90", "MinValue": "1", "MaxValue": "90"} {
		if v := get(p, key); v == nil || v.Value != want {
			t.Errorf("ProxyMaxConnectionsPercent %s: %v, want %s", key, v, want)
		}
	}
}

// Where the VPC is chosen, its description says what the Secrets Manager endpoint needs of it.
func TestTheVpcParameterSaysWhatDNSItNeeds(t *testing.T) {
	t.Parallel()
	d := path(loadTemplate(t), "Parameters", "VpcId", "Description")
	for _, attr := range []string{"enableDnsSupport", "enableDnsHostnames"} {
		if d == nil || !strings.Contains(d.Value, attr) {
			t.Errorf("VpcId's description does not name %s", attr)
		}
	}
}

// With the SAM stack pushing hints from private subnets, the functions reach IoT Core's data
// plane through an interface endpoint of their own, on 443 only, and the account's data
// endpoint host resolves to it inside the VPC; without IotDataEndpoint none of it exists.
func TestTheFunctionsReachIoTCoreOnlyWhenTheyPush(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t)
	res := get(tmpl, "Resources")
	for _, id := range []string{"FunctionEgressToIotData", "IotDataEndpointSecurityGroup", "IotDataVpcEndpoint", "IotDataHostedZone", "IotDataRecord"} {
		if c := path(res, id, "Condition"); c == nil || c.Value != "HasIotDataEndpoint" {
			t.Errorf("%s: not under HasIotDataEndpoint", id)
		}
	}
	if v := path(res, "IotDataVpcEndpoint", "Properties", "ServiceName"); v == nil || v.Value != "com.amazonaws.${AWS::Region}.iot.data" {
		t.Errorf("the endpoint's service: %v", v)
	}
	ingress := path(res, "IotDataEndpointSecurityGroup", "Properties", "SecurityGroupIngress")
	if ingress == nil || len(ingress.Content) != 1 || get(ingress.Content[0], "FromPort").Value != "443" ||
		get(ingress.Content[0], "SourceSecurityGroupId") == nil {
		t.Error("the endpoint's group must admit the functions' group on 443 alone")
	}
	if target, _ := refTarget(path(res, "IotDataHostedZone", "Properties", "Name")); target != "IotDataEndpoint" {
		t.Error("the hosted zone must be the IotDataEndpoint host")
	}
}

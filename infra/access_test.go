package infra_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mediator/shared/httpapi"
	"mediator/shared/wire"
)

// statements are a policy document's statements, each an !If's true branch where one wraps it.
func statements(doc *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	if list := get(doc, "Statement"); list != nil {
		for _, s := range list.Content {
			if s.Tag == "!If" && len(s.Content) == 3 {
				s = s.Content[1]
			}
			out = append(out, s)
		}
	}
	return out
}

// scalars are a node's scalar values: itself, or a list's items.
func scalars(n *yaml.Node) []string {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}
	}
	var out []string
	for _, c := range n.Content {
		out = append(out, c.Value)
	}
	return out
}

func TestAccessIsPlainCloudFormation(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	if get(tmpl, "Transform") != nil {
		t.Error("access.yaml has a Transform; it is meant to be plain CloudFormation")
	}
	for _, typ := range []string{"AWS::IAM::Role", "AWS::IAM::InstanceProfile", "AWS::RolesAnywhere::TrustAnchor", "AWS::RolesAnywhere::Profile"} {
		if len(resourcesOfType(tmpl, typ)) == 0 {
			t.Errorf("no %s", typ)
		}
	}
	for _, out := range []string{"AdminRoleArn", "NodeRoleArn", "NodeInstanceProfileName", "NodeInstanceProfileArn", "InvokePolicyArn"} {
		if path(tmpl, "Outputs", out, "Value") == nil {
			t.Errorf("no output %s", out)
		}
	}
}

// The roles are the ones the functions map callers by: the SAM template's defaults.
func TestAccessRolesAreTheOnesTheFunctionsName(t *testing.T) {
	t.Parallel()
	access, sam := loadFile(t, "access.yaml"), loadFile(t, "../template.yaml")
	for access_, sam_ := range map[string]string{"AdminRoleName": "IamAdminRole", "NodeRoleName": "IamNodeRole"} {
		a, s := path(access, "Parameters", access_, "Default"), path(sam, "Parameters", sam_, "Default")
		if a == nil || s == nil || a.Value != s.Value {
			t.Errorf("access.yaml's %s and template.yaml's %s default to different roles", access_, sam_)
		}
	}
	for role, param := range map[string]string{"AdminRole": "AdminRoleName", "NodeRole": "NodeRoleName"} {
		if target, _ := refTarget(path(get(access, "Resources"), role, "Properties", "RoleName")); target != param {
			t.Errorf("%s is not named by %s", role, param)
		}
	}
}

// A node is the session name of the node role, so only AWS may name its sessions: EC2 (the
// instance id) and Roles Anywhere with the name pinned to the certificate's subject CN. No
// account, user or federated identity may assume it with a name of its choosing.
func TestNodeRoleSessionsAreNamedByAWS(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	res := get(tmpl, "Resources")
	var services []string
	for _, s := range statements(path(res, "NodeRole", "Properties", "AssumeRolePolicyDocument")) {
		if get(s, "Effect").Value != "Allow" {
			continue
		}
		principal := get(s, "Principal")
		if keys := keys(principal); !slices.Equal(keys, []string{"Service"}) {
			t.Errorf("a statement trusts %v; want only a service principal", keys)
			continue
		}
		service := get(principal, "Service").Value
		services = append(services, service)
		switch service {
		case "ec2.amazonaws.com":
			if !slices.Equal(scalars(get(s, "Action")), []string{"sts:AssumeRole"}) {
				t.Errorf("EC2: actions %v", scalars(get(s, "Action")))
			}
		case "rolesanywhere.amazonaws.com":
			cond := get(s, "Condition")
			if v := path(cond, "StringEquals", "sts:RoleSessionName"); v == nil || v.Value != "${aws:PrincipalTag/x509Subject/CN}" {
				t.Error("Roles Anywhere: the session name is not pinned to the certificate's subject CN")
			}
			if target, _ := refTarget(path(cond, "ArnEquals", "aws:SourceArn")); target != "LabTrustAnchor" {
				t.Error("Roles Anywhere: not limited to the lab's trust anchor")
			}
		default:
			t.Errorf("the node role trusts %s", service)
		}
	}
	if !slices.Equal(services, []string{"ec2.amazonaws.com", "rolesanywhere.amazonaws.com"}) {
		t.Errorf("the node role trusts %v", services)
	}
	if v := path(res, "LabProfile", "Properties", "AcceptRoleSessionName"); v == nil || v.Value != "true" {
		t.Error("LabProfile does not accept a session name; every lab node would be named by its certificate's serial")
	}
	roles := path(res, "NodeInstanceProfile", "Properties", "Roles")
	if roles == nil || len(roles.Content) != 1 {
		t.Fatal("NodeInstanceProfile: want the node role alone")
	}
	if target, _ := refTarget(roles.Content[0]); target != "NodeRole" {
		t.Error("NodeInstanceProfile does not hold the node role")
	}
}

// The node role may call the routes an agent calls (the route table's NodeCaller routes: the
// heartbeat and the step report), and no other.
func TestNodeRoleMayOnlyHeartbeatAndReport(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	policies := path(get(tmpl, "Resources"), "NodeRole", "Properties", "Policies")
	var patterns []string
	for _, p := range policies.Content {
		if p.Tag == "!If" {
			continue // the push hints' (TestNodeRoleHearsOnlyItsOwnHints)
		}
		for _, s := range statements(get(p, "PolicyDocument")) {
			if !slices.Equal(scalars(get(s, "Action")), []string{"execute-api:Invoke"}) {
				t.Errorf("the node role may %v", scalars(get(s, "Action")))
			}
			patterns = append(patterns, scalars(get(s, "Resource"))...)
		}
	}
	// arn:...:${ApiId}/<stage>/<METHOD>/<path>: IAM's * matches any characters, / included.
	prefix := "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${ApiId}/*/"
	var allowed []string
	for _, r := range httpapi.Routes {
		arn := prefix + r.Method + regexp.MustCompile(`\{\w+\}`).ReplaceAllString(r.Path, "some-id")
		for _, p := range patterns {
			if !strings.HasPrefix(p, prefix) {
				t.Fatalf("%s: not a route of the ApiId parameter's API", p)
			}
			glob := "^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".*") + "$"
			if regexp.MustCompile(glob).MatchString(arn) {
				allowed = append(allowed, r.Key())
				break
			}
		}
	}
	// The node routes of the route table: the ones template.yaml authorizes by IAM in every
	// stack, and all the node role may call.
	var want []string
	for _, r := range httpapi.Routes {
		if r.Caller == httpapi.NodeCaller {
			want = append(want, r.Key())
		}
	}
	slices.Sort(want)
	if slices.Sort(allowed); len(want) == 0 || !slices.Equal(allowed, want) {
		t.Errorf("the node role may call %v, want %v", allowed, want)
	}
}

// Admins are humans: the account's IAM users, with MFA, each under its own user name.
func TestAdminRoleNeedsMFA(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	trust := statements(path(get(tmpl, "Resources"), "AdminRole", "Properties", "AssumeRolePolicyDocument"))
	if len(trust) != 1 {
		t.Fatalf("the admin role has %d trust statements", len(trust))
	}
	s := trust[0]
	if v := path(s, "Principal", "AWS"); v == nil || v.Tag != "!Sub" || v.Value != "arn:${AWS::Partition}:iam::${AWS::AccountId}:root" {
		t.Error("the admin role does not trust this account")
	}
	if v := path(s, "Condition", "Bool", "aws:MultiFactorAuthPresent"); v == nil || v.Value != "true" {
		t.Error("the admin role does not require MFA")
	}
	if v := path(s, "Condition", "StringEquals", "sts:RoleSessionName"); v == nil || v.Value != "${aws:username}" {
		t.Error("an admin's session name is not its IAM user name")
	}
}

// iamLike is IAM's StringLike: * any run of characters, ? any one, the rest literal.
func iamLike(pattern, value string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(value)
}

// sessionName is what STS takes as a role session name (AssumeRole, RoleSessionName).
var sessionName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

// A lab machine's node id is its certificate's CN, as its session name: the node role's trust
// must accept a session exactly when the name is one a node id can be (shared/wire.IDPattern),
// so no certificate yields credentials for a node that every heartbeat would then refuse. The
// trust is evaluated here as IAM does — its StringEquals pins the name to the CN, its
// StringNotLike refuses what no node id holds — over every name of two characters and names
// with each character inside, at the end, and at the length limits.
func TestLabCertificateNamesAreNodeIDs(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	var cond *yaml.Node
	for _, s := range statements(path(get(tmpl, "Resources"), "NodeRole", "Properties", "AssumeRolePolicyDocument")) {
		if v := path(s, "Principal", "Service"); v != nil && v.Value == "rolesanywhere.amazonaws.com" {
			cond = get(s, "Condition")
		}
	}
	if cond == nil {
		t.Fatal("no Roles Anywhere statement in the node role's trust")
	}
	if ops := keys(cond); !slices.Equal(ops, []string{"ArnEquals", "StringEquals", "StringNotLike"}) {
		t.Fatalf("the Roles Anywhere statement's conditions are %v; this test evaluates ArnEquals, StringEquals and StringNotLike", ops)
	}
	refused := scalars(path(cond, "StringNotLike", "sts:RoleSessionName"))
	if len(keys(get(cond, "StringNotLike"))) != 1 || len(refused) == 0 {
		t.Fatal("StringNotLike: want patterns of sts:RoleSessionName alone")
	}
	trusts := func(name string) bool { // with the CN equal to the name, as StringEquals requires
		return !slices.ContainsFunc(refused, func(p string) bool { return iamLike(p, name) }) // NOR, as IAM negates a list
	}
	alphabet := "abcxyzABCXYZ0123456789_+=,.@-"
	var names []string
	for _, a := range alphabet {
		for _, b := range alphabet {
			names = append(names, string(a)+string(b), "n"+string(a)+string(b)+"1")
		}
	}
	names = append(names, strings.Repeat("n", 64), "i-0123456789abcdef0", "rpi-4.lab_2")
	checked := 0
	for _, name := range names {
		if !sessionName.MatchString(name) {
			continue // STS refuses it before any trust policy is read
		}
		checked++
		if got, want := trusts(name), wire.IDPattern.MatchString(name); got != want {
			t.Errorf("CN %q: the trust accepts it %t, the node-id pattern %t", name, got, want)
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d names checked", checked)
	}
}

// The admin role trusts the account, with MFA, so that the principals' own policies decide who
// among the account assumes it: AdminGroup's policy allows sts:AssumeRole on the admin role and
// on nothing else, and nothing else in the stack grants sts:AssumeRole at all. Trusting any
// principal outside the account, or "*", would let policies this stack does not hold decide.
func TestAdminGroupDecidesWhoAssumesTheAdminRole(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	res := get(tmpl, "Resources")
	for _, s := range statements(path(res, "AdminRole", "Properties", "AssumeRolePolicyDocument")) {
		if p := get(s, "Principal"); !slices.Equal(keys(p), []string{"AWS"}) || get(p, "AWS").Value != "arn:${AWS::Partition}:iam::${AWS::AccountId}:root" {
			t.Errorf("the admin role trusts %v, want this account alone", keys(p))
		}
	}
	grants := map[string][]string{} // resource → the roles its policies let assume
	walk(res, func(n *yaml.Node) {
		if get(n, "Effect") == nil || !slices.ContainsFunc(scalars(get(n, "Action")), func(a string) bool {
			return a == "sts:AssumeRole" || a == "sts:*" || a == "*"
		}) || get(n, "Principal") != nil {
			return // a trust statement (it has a Principal), or no grant of sts:AssumeRole
		}
		for _, id := range keys(res) {
			if contains(get(res, id), n) {
				for _, r := range get(n, "Resource").Content {
					target, _ := refTarget(r)
					grants[id] = append(grants[id], target)
				}
				if len(get(n, "Resource").Content) == 0 {
					target, _ := refTarget(get(n, "Resource"))
					grants[id] = append(grants[id], target)
				}
			}
		}
	})
	if len(grants) != 1 || !slices.Equal(grants["AdminGroup"], []string{"AdminRole"}) {
		t.Errorf("sts:AssumeRole is granted by %v, want by AdminGroup on AdminRole alone", grants)
	}
}

// contains reports whether n is in the tree under root.
func contains(root, n *yaml.Node) bool {
	found := false
	walk(root, func(m *yaml.Node) { found = found || m == n })
	return found
}

// On IoT Core a node may connect as its own node id, and subscribe to and receive its own hint
// topic: nothing else, and never publish (a hint from a node to another would be a forgery
// costing the other a heartbeat; none can send one).
func TestNodeRoleHearsOnlyItsOwnHints(t *testing.T) {
	t.Parallel()
	tmpl := loadFile(t, "access.yaml")
	policies := path(get(tmpl, "Resources"), "NodeRole", "Properties", "Policies")
	prefix := "arn:${AWS::Partition}:iot:${AWS::Region}:${AWS::AccountId}:"
	node := "${!aws:PrincipalTag/x509Subject/CN}"
	want := map[string]string{
		"iot:Connect":   prefix + "client/" + node,
		"iot:Subscribe": prefix + "topicfilter/mediator/nodes/" + node + "/hint",
		"iot:Receive":   prefix + "topic/mediator/nodes/" + node + "/hint",
	}
	got := map[string]string{}
	for _, p := range policies.Content {
		if p.Tag != "!If" || len(p.Content) != 3 || p.Content[0].Value != "HasLabCa" {
			continue
		}
		for _, s := range statements(get(p.Content[1], "PolicyDocument")) {
			actions, resources := scalars(get(s, "Action")), scalars(get(s, "Resource"))
			if get(s, "Effect").Value != "Allow" || len(actions) != 1 || len(resources) != 1 || get(s, "Condition") != nil {
				t.Fatalf("a push statement of another shape: %v on %v", actions, resources)
			}
			got[actions[0]] = resources[0]
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the node role's IoT permissions: %v, want %v", got, want)
	}
	for a, r := range want {
		if got[a] != r {
			t.Errorf("%s on %q, want %q", a, got[a], r)
		}
	}
}

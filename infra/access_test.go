package infra_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mediator/shared/httpapi"
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

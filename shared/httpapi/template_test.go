package httpapi_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mediator/shared/httpapi"
)

// samTemplate is what the test reads of template.yaml. CloudFormation's short tags (!Ref,
// !GetAtt, !Sub, !If) are custom YAML tags: yaml.Node keeps them where a map would fail.
type samTemplate struct {
	root      *yaml.Node
	resources map[string]*yaml.Node // logical id → the resource's mapping
}

func loadTemplate(t *testing.T) samTemplate {
	t.Helper()
	raw, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("template.yaml is not YAML: %v", err)
	}
	tpl := samTemplate{root: doc.Content[0], resources: map[string]*yaml.Node{}}
	res := get(tpl.root, "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		tpl.resources[res.Content[i].Value] = res.Content[i+1]
	}
	return tpl
}

// get walks a path of mapping keys; nil when any is missing.
func get(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func (t samTemplate) ofType(typ string) []string {
	var ids []string
	for id, r := range t.resources {
		if v := get(r, "Type"); v != nil && v.Value == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// routes maps each API route key to the logical id of the function its integration invokes.
func (t samTemplate) routes() map[string]string {
	out := map[string]string{}
	target := regexp.MustCompile(`^integrations/\$\{(\w+)\}$`)
	for _, id := range t.ofType("AWS::ApiGatewayV2::Route") {
		key := get(t.resources[id], "Properties", "RouteKey").Value
		m := target.FindStringSubmatch(get(t.resources[id], "Properties", "Target").Value)
		fn := ""
		if m != nil {
			if uri := get(t.resources[m[1]], "Properties", "IntegrationUri"); uri != nil && uri.Tag == "!GetAtt" {
				fn = strings.TrimSuffix(uri.Value, ".Arn")
			}
		}
		out[key] = fn
	}
	return out
}

// logicalID is a function's logical id in the template: functions/submit is SubmitFunction.
func logicalID(function string) string {
	return strings.ToUpper(function[:1]) + function[1:] + "Function"
}

// diffRoutes lists every disagreement between the template's routes and the route table.
func diffRoutes(tpl map[string]string, table []httpapi.Route) []string {
	var diff []string
	seen := map[string]bool{}
	for _, r := range table {
		seen[r.Key()] = true
		switch fn, ok := tpl[r.Key()]; {
		case !ok:
			diff = append(diff, fmt.Sprintf("%s is in the route table but not in template.yaml", r.Key()))
		case fn != logicalID(r.Function):
			diff = append(diff, fmt.Sprintf("%s goes to %q in template.yaml, to %s in the route table", r.Key(), fn, logicalID(r.Function)))
		}
	}
	for key := range tpl {
		if !seen[key] {
			diff = append(diff, fmt.Sprintf("%s is in template.yaml but not in the route table", key))
		}
	}
	slices.Sort(diff)
	return diff
}

// The template serves exactly the routes the local gateway serves, each by the same function.
func TestTemplateRoutesMatchTheRouteTable(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t).routes()
	for _, d := range diffRoutes(tpl, httpapi.Routes) {
		t.Error(d)
	}
	// The comparison itself fails when a route goes missing from either side.
	removed := map[string]string{}
	for k, v := range tpl {
		removed[k] = v
	}
	delete(removed, httpapi.Routes[0].Key())
	if len(diffRoutes(removed, httpapi.Routes)) != 1 || len(diffRoutes(tpl, httpapi.Routes[1:])) != 1 {
		t.Fatal("a route removed from one side is not reported")
	}
}

// Every function is built from functions/<name> by the Makefile target SAM's makefile builder
// calls, and runs as a provided.al2023 arm64 bootstrap.
func TestTemplateFunctionsHaveCode(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	globals := get(tpl.root, "Globals", "Function")
	for key, want := range map[string]string{"Runtime": "provided.al2023", "Handler": "bootstrap", "CodeUri": "."} {
		if v := get(globals, key); v == nil || v.Value != want {
			t.Errorf("Globals.Function.%s is not %s", key, want)
		}
	}
	if arch := get(globals, "Architectures"); arch == nil || len(arch.Content) != 1 || arch.Content[0].Value != "arm64" {
		t.Error("Globals.Function.Architectures is not [arm64]")
	}
	functions := tpl.ofType("AWS::Serverless::Function")
	if len(functions) != 7 {
		t.Fatalf("%d functions: %v", len(functions), functions)
	}
	for _, id := range functions {
		if m := get(tpl.resources[id], "Metadata", "BuildMethod"); m == nil || m.Value != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod is not makefile", id)
		}
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		if _, err := os.Stat("../../functions/" + name + "/main.go"); err != nil {
			t.Errorf("%s: no functions/%s/main.go", id, name)
		}
		target := regexp.MustCompile(`(?m)^build-` + id + `:\n\t\$\(LAMBDA_BUILD\) \./functions/` + name + `$`)
		if !target.Match(makefile) {
			t.Errorf("%s: the Makefile has no build-%s target building ./functions/%s", id, id, name)
		}
	}
}

// EventBridge invokes the reap function every minute.
func TestTemplateScheduleTargetsReap(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
	var scheduled []string
	for _, id := range tpl.ofType("AWS::Serverless::Function") {
		events := get(tpl.resources[id], "Properties", "Events")
		if events == nil {
			continue
		}
		for i := 1; i < len(events.Content); i += 2 {
			ev := events.Content[i]
			if get(ev, "Type").Value == "Schedule" {
				scheduled = append(scheduled, id+" "+get(ev, "Properties", "Schedule").Value)
			}
		}
	}
	if !slices.Equal(scheduled, []string{"ReapFunction rate(1 minute)"}) {
		t.Fatalf("schedules: %v", scheduled)
	}
}

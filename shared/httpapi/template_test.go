package httpapi_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mediator/localdev/prerequisites"
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

// routes maps each API route key to the logical id of the function whose HttpApi event
// declares it. An event on another API than HttpApi is recorded under a key that names it, so
// the comparison with the route table reports it.
func (t samTemplate) routes() map[string]string {
	out := map[string]string{}
	for _, id := range t.ofType("AWS::Serverless::Function") {
		events := get(t.resources[id], "Properties", "Events")
		for i := 0; events != nil && i+1 < len(events.Content); i += 2 {
			ev := events.Content[i+1]
			if v := get(ev, "Type"); v == nil || v.Value != "HttpApi" {
				continue
			}
			method, path := get(ev, "Properties", "Method"), get(ev, "Properties", "Path")
			if method == nil || path == nil {
				out[id+" event "+events.Content[i].Value+" without Method and Path"] = id
				continue
			}
			key := strings.ToUpper(method.Value) + " " + path.Value
			if api := get(ev, "Properties", "ApiId"); api == nil || api.Tag != "!Ref" || api.Value != "HttpApi" {
				key += " (not on HttpApi)"
			}
			out[key] = id
		}
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

// Every function runs as a provided.al2023 arm64 bootstrap, built from functions/<name> by the
// Makefile target SAM's makefile builder calls (what each may do: template_ops_test.go).
func TestTemplateFunctionsHaveCode(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
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
	}

	// What SAM runs, `make build-<LogicalId>` with ARTIFACTS_DIR set, and `make build` run
	// the go command the same way: a stand-in for it records each call. Make runs them with
	// dash as its shell (fakeGoDir.make), so they are held to what macOS's bash 3.2 runs too.
	fake := fakeGo(t)
	for _, id := range functions {
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		calls := fake.make(t, "build-"+id, "ARTIFACTS_DIR=/x", "RDS_CA_BUNDLE=")
		want := goBuild("linux", "arm64", "/x/bootstrap", "./functions/"+name)
		if len(calls) != 1 || !slices.Equal(calls[0], want) {
			t.Errorf("make build-%s runs\n%q\nnot\n%q", id, calls, want)
		}
	}
	// RDS's CA bundle, when the checkout has it, goes into every package where
	// DatabaseSslRootCert's /var/task/rds-global-bundle.pem finds it.
	bundle := filepath.Join(t.TempDir(), "global-bundle.pem")
	if err := os.WriteFile(bundle, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range functions {
		artifacts := t.TempDir()
		fake.make(t, "build-"+id, "ARTIFACTS_DIR="+artifacts, "RDS_CA_BUNDLE="+bundle)
		if got, err := os.ReadFile(filepath.Join(artifacts, "rds-global-bundle.pem")); err != nil || string(got) != "-----BEGIN CERTIFICATE-----\n" {
			t.Errorf("make build-%s with RDS_CA_BUNDLE does not ship it as rds-global-bundle.pem: %v", id, err)
		}
	}
	var want [][]string
	for _, id := range functions {
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		want = append(want, goBuild("linux", "amd64", "bin/"+name+"/bootstrap", "./functions/"+name))
	}
	calls := fake.make(t, "build", "GOOS=linux", "GOARCH=amd64")
	sortCalls := func(a, b []string) int { return strings.Compare(a[len(a)-1], b[len(b)-1]) }
	slices.SortFunc(calls, sortCalls)
	slices.SortFunc(want, sortCalls)
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Errorf("make build runs\n%q\nnot\n%q", calls, want)
	}
}

// goBuild is the go command line that builds one function: a static bootstrap without the
// RPC handler, with no build paths in it, stripped.
func goBuild(goos, goarch, out, pkg string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=" + goos, "GOARCH=" + goarch,
		"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
}

// fakeGoCommand stands in for go: it records its environment's build settings and its
// arguments, one per line, and an empty line after them.
const fakeGoCommand = `#!/bin/sh
{
	echo "CGO_ENABLED=$CGO_ENABLED"; echo "GOOS=$GOOS"; echo "GOARCH=$GOARCH"
	printf '%s\n' "$@"; echo
} >>"$FAKE_GO_LOG"
`

// fakeGoDir is a folder holding the stand-in go, and the dash that make runs recipes with.
type fakeGoDir struct{ dir, dash string }

// fakeGo makes the stand-in and finds dash: a POSIX shell that refuses bash's extensions, as
// macOS's /bin/bash (3.2) refuses bash 4's (${name^}). bash in POSIX mode would not do: it
// still takes them.
func fakeGo(t *testing.T) fakeGoDir {
	t.Helper()
	for _, tool := range []string{"make", "dash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the Makefile's build targets are run by make under dash: %s", prerequisites.Need(tool))
		}
	}
	dash, _ := exec.LookPath("dash")
	// The stand-in must refuse what bash 3.2 refuses, or running under it proves nothing.
	if out, err := exec.Command(dash, "-c", `n=a; echo "${n^}"`).CombinedOutput(); err == nil {
		t.Fatalf("%s takes bash 4's ${n^} (%q): it is no stand-in for a shell without bash 4's expansions", dash, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(fakeGoCommand), 0o755); err != nil {
		t.Fatal(err)
	}
	return fakeGoDir{dir: dir, dash: dash}
}

// make runs make in the module root with the stand-in as GO and dash as the recipes' shell,
// and returns the go commands it ran. .SHELLFLAGS drops the Makefile's -o pipefail, which
// dash lacks: only make stress relies on it, and bash 3.2 has it. The environment carries no
// build settings and nothing from an enclosing make, so what the stand-in sees is what the
// Makefile chose.
func (d fakeGoDir) make(t *testing.T, args ...string) [][]string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "calls")
	flags := []string{"--no-print-directory", "SHELL=" + d.dash, ".SHELLFLAGS=-c", "GO=" + filepath.Join(d.dir, "go")}
	cmd := exec.Command("make", append(flags, args...)...)
	cmd.Dir = "../.."
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "FAKE_GO_LOG=" + log}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s, its shell dash: %v\n%s", strings.Join(args, " "), err, out)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("make %s ran no go command: %v", strings.Join(args, " "), err)
	}
	var calls [][]string
	for _, call := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		calls = append(calls, strings.Split(call, "\n"))
	}
	return calls
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

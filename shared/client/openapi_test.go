package client_test

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"mediator/shared/client"
	"mediator/shared/httpapi"
)

// document is what the test reads of the OpenAPI document: each operation's query parameters
// and the statuses it answers with JSON that is not a problem.
type document struct {
	ops map[string]*docOp // by "METHOD /path"
}

type docOp struct {
	query    []string
	statuses map[int]string // status → "json", "problem", or both joined
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

func readDocument(t *testing.T) document {
	t.Helper()
	raw, err := os.ReadFile("../httpapi/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Parameters map[string]parameter `yaml:"parameters"`
			Responses  map[string]response  `yaml:"responses"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := document{ops: map[string]*docOp{}}
	for path, item := range doc.Paths {
		var shared []parameter
		if p, ok := item["parameters"]; ok {
			if err := p.Decode(&shared); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range httpMethods {
			node, ok := item[m]
			if !ok {
				continue
			}
			var op struct {
				Parameters []parameter         `yaml:"parameters"`
				Responses  map[string]response `yaml:"responses"`
			}
			if err := node.Decode(&op); err != nil {
				t.Fatal(err)
			}
			d := &docOp{statuses: map[int]string{}}
			for _, p := range append(slices.Clone(shared), op.Parameters...) {
				if p.Ref != "" {
					p = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				if p.In == "query" {
					d.query = append(d.query, p.Name)
				}
			}
			for code, r := range op.Responses {
				if r.Ref != "" {
					r = doc.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")]
				}
				var status int
				if _, err := fmt.Sscan(code, &status); err != nil {
					continue // "default", "4XX": none in this document, and no status to check
				}
				var kinds []string
				if _, ok := r.Content["application/json"]; ok {
					kinds = append(kinds, "json")
				}
				if _, ok := r.Content["application/problem+json"]; ok {
					kinds = append(kinds, "problem")
				}
				d.statuses[status] = strings.Join(kinds, "+")
			}
			out.ops[strings.ToUpper(m)+" "+path] = d
		}
	}
	return out
}

type parameter struct {
	Ref  string `yaml:"$ref"`
	Name string `yaml:"name"`
	In   string `yaml:"in"`
}

type response struct {
	Ref     string         `yaml:"$ref"`
	Content map[string]any `yaml:"content"`
}

func key(method, path string) string { return method + " " + path }

// console reports whether a route is one of the web console's (shared/console): pages and
// their settings for a browser, which no client method has any use for.
func console(route string) bool { return strings.HasPrefix(route, "GET /console") }

// The client calls every route the OpenAPI document describes, and only those; it sends only
// the query parameters the document declares, and all of them; what it takes for an answer is
// what the document answers with JSON, every 2xx included.
func TestTheClientCallsEveryRouteOfTheDocument(t *testing.T) {
	doc := readDocument(t)
	byRoute := map[string][]client.Operation{}
	for _, op := range client.Operations {
		byRoute[key(op.Method, op.Path)] = append(byRoute[key(op.Method, op.Path)], op)
	}
	for route := range doc.ops {
		if byRoute[route] == nil && !console(route) {
			t.Errorf("the document has %s; no client method calls it", route)
		}
	}
	for route, ops := range byRoute {
		d := doc.ops[route]
		if d == nil {
			t.Errorf("the client calls %s (%s); the document has no such route", route, ops[0].Func)
			continue
		}
		var sent []string
		accepted := map[int]bool{}
		for _, op := range ops {
			for _, q := range op.Query {
				if !slices.Contains(d.query, q) {
					t.Errorf("%s: %s sends ?%s, which the document does not declare", route, op.Func, q)
				}
				sent = append(sent, q)
			}
			for _, s := range op.Accept {
				accepted[s] = true
				if !strings.HasPrefix(d.statuses[s], "json") {
					t.Errorf("%s: %s takes %d for an answer; the document answers it with %q", route, op.Func, s, d.statuses[s])
				}
			}
		}
		for _, q := range d.query {
			if !slices.Contains(sent, q) {
				t.Errorf("%s: the document declares ?%s; no client method sends it", route, q)
			}
		}
		for s := range d.statuses {
			if s < 300 && !accepted[s] {
				t.Errorf("%s: the document answers %d; no client method takes it", route, s)
			}
			if s >= 400 && !accepted[s] && !strings.Contains(d.statuses[s], "problem") {
				t.Errorf("%s: the document answers %d without a problem body", route, s)
			}
		}
	}
}

// Every route the gateway serves has a client method, and the other way round.
func TestTheClientCallsEveryRouteServed(t *testing.T) {
	served := map[string]bool{}
	for _, r := range httpapi.Routes {
		served[r.Key()] = true
	}
	called := map[string]bool{}
	for _, op := range client.Operations {
		called[key(op.Method, op.Path)] = true
		if !served[key(op.Method, op.Path)] {
			t.Errorf("the client calls %s, which is not in httpapi.Routes", key(op.Method, op.Path))
		}
	}
	for route := range served {
		if !called[route] && !console(route) {
			t.Errorf("httpapi.Routes serves %s; no client method calls it", route)
		}
	}
}

// The table names the methods: each exists, and each exported method that calls the API is
// in it.
func TestTheOperationsTableIsTheClientsMethods(t *testing.T) {
	helpers := []string{"Base", "Auth", "RunPages", "ForOwner"} // no route of their own
	typ := reflect.TypeFor[*client.Client]()
	named := map[string]bool{}
	for _, op := range client.Operations {
		if named[op.Func] {
			t.Errorf("%s is in the table twice", op.Func)
		}
		named[op.Func] = true
		if _, ok := typ.MethodByName(op.Func); !ok {
			t.Errorf("the table names %s, which is not a method of *Client", op.Func)
		}
	}
	for i := range typ.NumMethod() {
		m := typ.Method(i).Name
		if !named[m] && !slices.Contains(helpers, m) {
			t.Errorf("*Client.%s is not in the operations table", m)
		}
	}
}

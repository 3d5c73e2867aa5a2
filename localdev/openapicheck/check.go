// Package openapicheck checks the OpenAPI document (shared/httpapi/openapi.yaml) itself: that
// it is valid OpenAPI 3.1, that every $ref resolves inside it, that it describes exactly the
// routes of the route table, and that it keeps the rules the handler tests rely on to catch a
// response the document does not describe. `make lint` runs it (localdev/cmd/openapicheck),
// and so does a test.
package openapicheck

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
	"gopkg.in/yaml.v3"

	"mediator/shared/httpapi"
)

// methods are the operation keys of a path item.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// freeForm are the only object schemas that may take any member: what clients and nodes put
// in a run (a step's spec, a run's metadata) and the OpenAPI objects inside the served
// document. Every other object schema says additionalProperties (false, or the schema of a
// map's values), so a member the document does not name fails validation.
var freeForm = []string{
	"#/components/schemas/Spec",
	"#/components/schemas/Metadata",
	"#/components/schemas/OpenAPIDocument/properties/info",
	"#/components/schemas/OpenAPIDocument/properties/paths",
	"#/components/schemas/OpenAPIDocument/properties/webhooks",
	"#/components/schemas/OpenAPIDocument/properties/components",
}

// Check returns every finding about doc, the route table routes being what it must describe.
func Check(doc []byte, routes []httpapi.Route) []string {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return []string{"not YAML: " + err.Error()}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return []string{"not one YAML mapping"}
	}
	top := root.Content[0]
	var out []string
	if v := get(top, "openapi"); v == nil || !strings.HasPrefix(v.Value, "3.1.") {
		out = append(out, "openapi: want 3.1.x")
	}
	out = append(out, refs(top)...)
	out = append(out, DiffRoutes(Routes(top), routes)...)
	out = append(out, objectSchemas(top)...)
	out = append(out, operations(top, routes)...)
	out = append(out, model(doc)...)
	return out
}

// Quiet is libopenapi's default configuration without its log, which goes to stdout: what it
// would log comes back as errors, and the callers report those.
func Quiet() *datamodel.DocumentConfiguration {
	c := datamodel.NewDocumentConfiguration()
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

// Routes are the document's operations as route keys ("POST /v1/runs"), in its order.
func Routes(top *yaml.Node) []string {
	var keys []string
	paths := get(top, "paths")
	eachPair(paths, func(path string, item *yaml.Node) {
		eachPair(item, func(method string, _ *yaml.Node) {
			if slices.Contains(methods, method) {
				keys = append(keys, strings.ToUpper(method)+" "+path)
			}
		})
	})
	return keys
}

// DocumentRoutes are the route keys of an OpenAPI document.
func DocumentRoutes(doc []byte) ([]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Content) != 1 {
		return nil, errors.New("not one YAML document")
	}
	return Routes(root.Content[0]), nil
}

// DiffRoutes lists every route one side has and the other lacks.
func DiffRoutes(documented []string, routes []httpapi.Route) []string {
	var diff []string
	table := map[string]bool{}
	for _, r := range routes {
		table[r.Key()] = true
		if !slices.Contains(documented, r.Key()) {
			diff = append(diff, r.Key()+" is in the route table but not in the OpenAPI document")
		}
	}
	for _, key := range documented {
		if !table[key] {
			diff = append(diff, key+" is in the OpenAPI document but not in the route table")
		}
	}
	slices.Sort(diff)
	return diff
}

// refs: every $ref points inside the document (it must stand alone) at something there.
func refs(top *yaml.Node) []string {
	var out []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "$ref" {
					ref := n.Content[i+1].Value
					switch {
					case !strings.HasPrefix(ref, "#/"):
						out = append(out, fmt.Sprintf("line %d: $ref %q points outside the document", n.Content[i+1].Line, ref))
					case pointer(top, ref) == nil:
						out = append(out, fmt.Sprintf("line %d: $ref %q resolves to nothing", n.Content[i+1].Line, ref))
					}
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(top)
	return out
}

// pointer resolves a local JSON pointer ("#/components/schemas/Run"), nil when it does not.
func pointer(top *yaml.Node, ref string) *yaml.Node {
	n := top
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n.Kind {
		case yaml.MappingNode:
			n = get(n, tok)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
		if n == nil {
			return nil
		}
	}
	return n
}

// objectSchemas: every schema typed object says additionalProperties, and only the free-form
// ones say true.
func objectSchemas(top *yaml.Node) []string {
	var out []string
	var schema func(n *yaml.Node, at string)
	schema = func(n *yaml.Node, at string) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		if isObject(n) {
			ap := get(n, "additionalProperties")
			switch {
			case ap == nil:
				out = append(out, fmt.Sprintf("%s (line %d): an object schema without additionalProperties", at, n.Line))
			case ap.Kind == yaml.ScalarNode && ap.Value == "true" && !slices.Contains(freeForm, at):
				out = append(out, fmt.Sprintf("%s (line %d): additionalProperties: true outside the free-form schemas", at, n.Line))
			}
		}
		eachPair(get(n, "properties"), func(name string, p *yaml.Node) { schema(p, at+"/properties/"+name) })
		eachPair(get(n, "$defs"), func(name string, p *yaml.Node) { schema(p, at+"/$defs/"+name) })
		for _, key := range []string{"items", "additionalProperties", "not", "propertyNames", "contains", "if", "then", "else"} {
			schema(get(n, key), at+"/"+key)
		}
		for _, key := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
			if list := get(n, key); list != nil && list.Kind == yaml.SequenceNode {
				for i, s := range list.Content {
					schema(s, fmt.Sprintf("%s/%s/%d", at, key, i))
				}
			}
		}
	}
	eachPair(get(top, "components", "schemas"), func(name string, s *yaml.Node) { schema(s, "#/components/schemas/"+name) })
	// Schemas outside components: under parameters, headers and media types, wherever they are.
	var walk func(n *yaml.Node, at string)
	walk = func(n *yaml.Node, at string) {
		eachPair(n, func(key string, v *yaml.Node) {
			if key == "schema" {
				schema(v, at+"/schema")
				return
			}
			if at == "#" && key == "components" {
				eachPair(v, func(kind string, c *yaml.Node) {
					if kind != "schemas" && kind != "examples" {
						walk(c, "#/components/"+kind)
					}
				})
				return
			}
			if key != "examples" && key != "example" {
				walk(v, at+"/"+strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1"))
			}
		})
		if n != nil && n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(top, "#")
	return out
}

func isObject(n *yaml.Node) bool {
	t := get(n, "type")
	if t == nil {
		return false
	}
	if t.Kind == yaml.ScalarNode {
		return t.Value == "object"
	}
	return slices.ContainsFunc(t.Content, func(c *yaml.Node) bool { return c.Value == "object" })
}

// operations: each operation says who may call it, as its route's Caller in the route table
// says — no one in particular (security: []) exactly for AnyoneCaller's routes; for the others
// the same principal kinds under every scheme its caller may present (iam and devToken as
// roles, jwt as the scopes mediator/<kind>): iam, jwt and devToken on a PeopleCaller route, iam
// and devToken alone on a NodeCaller route, which no stack lets a token reach — and lists the
// statuses every handler can answer: 400 (a query parameter it does not take) and 500 always,
// 401 and 403 when it needs credentials, 415 when it takes a body (one declared as something it
// cannot be read as).
func operations(top *yaml.Node, routes []httpapi.Route) []string {
	callers := map[string]httpapi.Caller{}
	for _, r := range routes {
		callers[r.Key()] = r.Caller
	}
	var out []string
	eachPair(get(top, "paths"), func(path string, item *yaml.Node) {
		eachPair(item, func(method string, op *yaml.Node) {
			if !slices.Contains(methods, method) {
				return
			}
			key := strings.ToUpper(method) + " " + path
			sec := get(op, "security")
			if sec == nil || sec.Kind != yaml.SequenceNode {
				out = append(out, key+": no security (write security: [] for a public route)")
				return
			}
			kinds := map[string][]string{}
			for _, req := range sec.Content {
				eachPair(req, func(scheme string, scopes *yaml.Node) {
					for _, s := range scopes.Content {
						kind := s.Value
						if scheme == "jwt" {
							var ok bool
							if kind, ok = strings.CutPrefix(kind, "mediator/"); !ok {
								out = append(out, fmt.Sprintf("%s: jwt scope %q is not mediator/<kind>", key, s.Value))
							}
						}
						kinds[scheme] = append(kinds[scheme], kind)
					}
				})
			}
			caller, known := callers[key]
			if known && (len(sec.Content) == 0) != (caller == httpapi.AnyoneCaller) {
				out = append(out, fmt.Sprintf("%s: public is %t here, but the route table's caller is %q", key, len(sec.Content) == 0, caller))
			}
			schemes := []string{"iam", "jwt", "devToken"}
			if caller == httpapi.NodeCaller {
				schemes = []string{"iam", "devToken"}
				if len(kinds["jwt"]) > 0 {
					out = append(out, fmt.Sprintf("%s: jwt %v on a node route, which nodes call signed (iam) in every stack", key, kinds["jwt"]))
				}
			}
			want := []string{"400", "500"}
			if len(sec.Content) > 0 {
				want = append(want, "401", "403")
				for _, scheme := range schemes {
					slices.Sort(kinds[scheme])
					if len(kinds[scheme]) == 0 || !slices.Equal(kinds[scheme], kinds["iam"]) {
						out = append(out, fmt.Sprintf("%s: %s serves %v, iam %v: every scheme must name the same kinds", key, scheme, kinds[scheme], kinds["iam"]))
					}
				}
			}
			if get(op, "requestBody") != nil {
				want = append(want, "415")
			}
			for _, status := range want {
				if get(op, "responses", status) == nil {
					out = append(out, fmt.Sprintf("%s: no %s response", key, status))
				}
			}
		})
	})
	return out
}

// model builds the document as libopenapi reads it, validates it against the OpenAPI 3.1
// schema, and checks every example against the schema of the body it illustrates.
func model(doc []byte) []string {
	d, err := libopenapi.NewDocumentWithConfiguration(doc, Quiet())
	if err != nil {
		return []string{"libopenapi: " + err.Error()}
	}
	var out []string
	if ok, errs := schema_validation.ValidateOpenAPIDocument(d); !ok {
		for _, e := range errs {
			line := "not valid OpenAPI: " + e.Message
			if e.Reason != "" {
				line += " (" + e.Reason + ")"
			}
			for _, f := range e.SchemaValidationErrors {
				line += fmt.Sprintf("\n\tline %d, %s: %s", f.Line, f.KeywordLocation, f.Reason)
			}
			out = append(out, line)
		}
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return append(out, "libopenapi: "+err.Error())
	}
	return append(out, examples(&m.Model)...)
}

// examples: every example of a request or response body is a body its schema accepts.
func examples(m *v3.Document) []string {
	var out []string
	sv := schema_validation.NewSchemaValidator()
	check := func(where string, content *orderedmap.Map[string, *v3.MediaType]) {
		for mt, media := range content.FromOldest() {
			if media.Schema == nil {
				continue
			}
			for name, ex := range media.Examples.FromOldest() {
				if ex.Value == nil {
					out = append(out, fmt.Sprintf("%s %s example %q has no value", where, mt, name))
					continue
				}
				var v any
				if err := ex.Value.Decode(&v); err != nil {
					out = append(out, fmt.Sprintf("%s %s example %q: %v", where, mt, name, err))
					continue
				}
				if ok, errs := sv.ValidateSchemaObject(media.Schema.Schema(), v); !ok {
					for _, e := range errs {
						line := fmt.Sprintf("%s %s example %q does not fit its schema: %s", where, mt, name, e.Message)
						for _, f := range e.SchemaValidationErrors {
							line += fmt.Sprintf("\n\t%s: %s", f.FieldPath, f.Reason)
						}
						out = append(out, line)
					}
				}
			}
		}
	}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			key := strings.ToUpper(method) + " " + path
			if op.RequestBody != nil && op.RequestBody.Content != nil {
				check(key+" request", op.RequestBody.Content)
			}
			if op.Responses == nil {
				continue
			}
			for code, resp := range op.Responses.Codes.FromOldest() {
				if resp.Content != nil {
					check(key+" "+code, resp.Content)
				}
			}
		}
	}
	return out
}

// get walks mapping keys; nil when one is missing.
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

// eachPair calls fn with every key and value of a mapping, in order.
func eachPair(n *yaml.Node, fn func(key string, v *yaml.Node)) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		fn(n.Content[i].Value, n.Content[i+1])
	}
}

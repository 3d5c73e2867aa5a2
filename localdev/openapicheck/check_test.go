package openapicheck_test

import (
	"strings"
	"testing"

	"mediator/localdev/openapicheck"
	"mediator/shared/httpapi"
)

// after replaces the first old that follows anchor in the document, failing when there is none.
func after(t *testing.T, doc, anchor, old, new string) string {
	t.Helper()
	i := strings.Index(doc, anchor)
	if i < 0 || !strings.Contains(doc[i:], old) {
		t.Fatalf("no %q after %q in the document", old, anchor)
	}
	return doc[:i] + strings.Replace(doc[i:], old, new, 1)
}

// Each way the document can go wrong is a finding.
func TestCheckFindsEveryFault(t *testing.T) {
	t.Parallel()
	doc := string(httpapi.OpenAPI)
	if found := openapicheck.Check(httpapi.OpenAPI, httpapi.Routes); found != nil {
		t.Fatalf("the document itself: %q", found)
	}
	for _, c := range []struct {
		name, doc, want string
	}{
		{"a $ref to nothing", after(t, doc, "    Run:", `"#/components/schemas/Step"`, `"#/components/schemas/Stpe"`), "resolves to nothing"},
		{"a $ref outside the document", after(t, doc, "    Run:", `"#/components/schemas/Role"`, `"role.yaml#/Role"`), "points outside the document"},
		{"a route the table lacks", strings.Replace(doc, "  /v1/leases:\n", "  /v1/lease:\n", 1), "GET /v1/lease is in the OpenAPI document but not in the route table"},
		{"a route the document lacks", strings.Replace(doc, "  /v1/leases:\n", "  /v1/lease:\n", 1), "GET /v1/leases is in the route table but not in the OpenAPI document"},
		{"an open object schema", after(t, doc, "    Step:\n", "      additionalProperties: false\n", ""), "#/components/schemas/Step (line"},
		{"additionalProperties: true on a closed one", after(t, doc, "    Node:\n", "additionalProperties: false", "additionalProperties: true"), "outside the free-form schemas"},
		{"an open schema inline", after(t, doc, "  /v1/nodes:", "$ref: \"#/components/schemas/NodeList\"", "{type: object, properties: {nodes: {type: array}}}"), "an object schema without additionalProperties"},
		{"not OpenAPI (info without its title)", strings.Replace(doc, "  title: Mediator\n", "", 1), "not valid OpenAPI"},
		{"not OpenAPI 3.1", strings.Replace(doc, "openapi: 3.1.0", "openapi: 3.0.3", 1), "want 3.1"},
		{"an example its schema refuses", after(t, doc, "operationId: heartbeat", "next_heartbeat_seconds: 20", "next_heartbeat_seconds: soon"), "does not fit its schema"},
		{"a scheme serving other kinds", after(t, doc, "operationId: removeNode", "- jwt: [mediator/admin]", "- jwt: [mediator/client]"), "every scheme must name the same kinds"},
		{"a jwt scope that names no kind", after(t, doc, "operationId: removeNode", "- jwt: [mediator/admin]", "- jwt: [admin]"), "is not mediator/<kind>"},
		{"a jwt requirement on a node route", after(t, doc, "operationId: heartbeat", "        - devToken: [node]\n", "        - jwt: [mediator/node]\n        - devToken: [node]\n"),
			"PUT /v1/nodes/{node_id}: jwt [node] on a node route"},
		{"a people route without jwt", after(t, doc, "operationId: removeNode", "        - jwt: [mediator/admin]\n", ""), "DELETE /v1/nodes/{node_id}: jwt serves []"},
		{"a public node route", after(t, doc, "operationId: reportResult", "      security:\n        - iam: [node]\n        - devToken: [node]\n", "      security: []\n"),
			"POST /v1/runs/{run_id}/steps/{step_id}/result: public is true here"},
		{"a public route that asks for credentials", after(t, doc, "operationId: healthz", "      security: []\n", "      security:\n        - iam: [client]\n        - jwt: [mediator/client]\n        - devToken: [client]\n"),
			"GET /healthz: public is false here"},
		{"no security at all", after(t, doc, "operationId: listLeases", "      security:\n", "      x-security:\n"), "no security"},
		{"no 401 on a route that needs credentials", after(t, doc, "operationId: listLeases", `"401":`, `"402":`), "GET /v1/leases: no 401 response"},
		{"no 415 on a route that takes a body", after(t, doc, "operationId: cancelRun", `"415":`, `"416":`), "POST /v1/runs/{run_id}/cancel: no 415 response"},
	} {
		found := openapicheck.Check([]byte(c.doc), httpapi.Routes)
		if !strings.Contains(strings.Join(found, "\n"), c.want) {
			t.Errorf("%s: found %q, want %q", c.name, found, c.want)
		}
	}
}

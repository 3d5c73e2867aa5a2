// Package httpapi holds the handlers API Gateway invokes: one per Lambda function (submit,
// query, nodes, result, cancel), each taking the APIGatewayV2HTTPRequest API Gateway sends
// and answering JSON or an RFC 9457 problem.
package httpapi

import "mediator/shared/startup"

// Route is one HTTP route and the function that serves it. Routes is the single list the
// local gateway serves and template.yaml is checked against.
type Route struct {
	Method   string
	Path     string // API Gateway syntax: /v1/runs/{run_id}
	Function string // functions/<Function>
}

// Key is API Gateway's route key, "POST /v1/runs".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is every route of the API; openapi.yaml describes each.
var Routes = []Route{
	{"POST", "/v1/runs", "submit"},
	{"GET", "/v1/runs", "query"},
	{"GET", "/v1/runs/{run_id}", "query"},
	{"POST", "/v1/runs/{run_id}/cancel", "cancel"},
	{"POST", "/v1/runs/{run_id}/priority", "cancel"},
	{"POST", "/v1/runs/{run_id}/steps/{step_id}/result", "result"},
	{"PUT", "/v1/nodes/{node_id}", "nodes"},
	{"DELETE", "/v1/nodes/{node_id}", "nodes"},
	{"POST", "/v1/nodes/{node_id}/drain", "nodes"},
	{"DELETE", "/v1/nodes/{node_id}/drain", "nodes"},
	{"GET", "/v1/nodes", "query"},
	{"GET", "/v1/leases", "query"},
	{"GET", "/v1/queue", "query"},
	{"GET", "/healthz", "query"},
	{"GET", "/v1/openapi.json", "query"},
}

// Functions builds every HTTP function's handler by name, as the local gateway serves them.
func Functions(d startup.Deps) map[string]Handler {
	return map[string]Handler{
		"submit": Submit(d),
		"query":  Query(d),
		"nodes":  Nodes(d),
		"result": Result(d),
		"cancel": Cancel(d),
	}
}

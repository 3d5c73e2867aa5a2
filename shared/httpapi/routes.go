// Package httpapi holds the handlers API Gateway invokes: one per Lambda function (submit,
// query, nodes, result, cancel), each taking the APIGatewayV2HTTPRequest API Gateway sends
// and answering JSON or an RFC 9457 problem.
package httpapi

import "mediator/shared/startup"

// Route is one HTTP route, the function that serves it, and who calls it. Routes is the single
// list the local gateway serves and template.yaml is checked against.
type Route struct {
	Method   string
	Path     string // API Gateway syntax: /v1/runs/{run_id}
	Function string // functions/<Function>
	Caller   Caller
}

// Caller is who a route is for, which decides how API Gateway authorizes it.
type Caller string

const (
	// NodeCaller: the routes a node's agent calls as itself. Authorized by IAM in every stack (the
	// node id pinned by the node role's trust), whatever the stack chooses for people.
	NodeCaller Caller = "nodes"
	// PeopleCaller: clients, CI and admins — IAM or JWT, as the stack chooses; with JWT, a route
	// requires one of the Mediator scopes (auth.Scopes).
	PeopleCaller Caller = "people"
	// AnyoneCaller: no credentials (/healthz, the contract, the console's files).
	AnyoneCaller Caller = "anyone"
)

// Key is API Gateway's route key, "POST /v1/runs".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is every route of the API; openapi.yaml describes each.
var Routes = []Route{
	{"POST", "/v1/runs", "submit", PeopleCaller},
	{"GET", "/v1/runs", "query", PeopleCaller},
	{"GET", "/v1/runs/{run_id}", "query", PeopleCaller},
	{"POST", "/v1/runs/{run_id}/cancel", "cancel", PeopleCaller},
	{"POST", "/v1/runs/{run_id}/priority", "cancel", PeopleCaller},
	{"POST", "/v1/runs/{run_id}/release", "cancel", PeopleCaller},
	{"POST", "/v1/runs/{run_id}/extend", "cancel", PeopleCaller},
	{"POST", "/v1/runs/{run_id}/steps/{step_id}/result", "result", NodeCaller},
	{"POST", "/v1/runs/{run_id}/steps/{step_id}/log-urls", "result", NodeCaller},
	{"GET", "/v1/runs/{run_id}/steps/{step_id}/log", "query", PeopleCaller},
	{"PUT", "/v1/nodes/{node_id}", "nodes", NodeCaller},
	{"DELETE", "/v1/nodes/{node_id}", "nodes", PeopleCaller},
	{"POST", "/v1/nodes/{node_id}/drain", "nodes", PeopleCaller},
	{"DELETE", "/v1/nodes/{node_id}/drain", "nodes", PeopleCaller},
	{"POST", "/v1/nodes/{node_id}/quarantine", "nodes", PeopleCaller},
	{"DELETE", "/v1/nodes/{node_id}/quarantine", "nodes", PeopleCaller},
	{"GET", "/v1/nodes/{node_id}", "query", PeopleCaller},
	{"GET", "/v1/nodes", "query", PeopleCaller},
	{"PUT", "/v1/health-checks/{name}", "nodes", PeopleCaller},
	{"DELETE", "/v1/health-checks/{name}", "nodes", PeopleCaller},
	{"GET", "/v1/health-checks/{name}", "query", PeopleCaller},
	{"GET", "/v1/health-checks", "query", PeopleCaller},
	{"GET", "/v1/leases", "query", PeopleCaller},
	{"GET", "/v1/queue", "query", PeopleCaller},
	{"GET", "/healthz", "query", AnyoneCaller},
	{"GET", "/v1/openapi.json", "query", AnyoneCaller},
	// The web console: its files hold no secret, and every API call it makes carries the
	// signed-in person's credentials. config.json comes before the greedy path that would
	// also match it (API Gateway too prefers the more specific route).
	{"GET", "/console", "query", AnyoneCaller},
	{"GET", "/console/config.json", "query", AnyoneCaller},
	{"GET", "/console/{proxy+}", "query", AnyoneCaller},
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

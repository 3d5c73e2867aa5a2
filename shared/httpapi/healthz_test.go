package httpapi_test

import (
	"regexp"
	"testing"

	"mediator/localdev/apitest"
	"mediator/migrations"
	"mediator/shared/httpapi"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	resp := env.Do(apitest.Nobody, "GET", "/healthz", nil)
	var body struct {
		Status        string `json:"status"`
		SchemaVersion uint   `json:"schema_version"`
	}
	resp.Decode(t, &body)
	if resp.Status != 200 || body.Status != "ok" || body.SchemaVersion != migrations.Latest() {
		t.Fatalf("healthz: %s", resp)
	}
	env.Exec(`UPDATE schema_migrations SET version = 0`)
	if resp := env.Do(apitest.Nobody, "GET", "/healthz", nil); resp.Status != 503 {
		t.Fatalf("healthz with the schema behind: %s", resp)
	}
}

// Every answer, a success or a problem, says the handler's own time (ServerTiming in the
// OpenAPI document): the fleet benchmark tells the server's tail from its generator's by it.
func TestEveryAnswerSaysTheHandlersTime(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	timing := regexp.MustCompile(`^` + httpapi.ServerTimingMetric + `;dur=[0-9]+\.[0-9]{3}$`)
	for _, resp := range []apitest.Response{
		env.Do(apitest.Nobody, "GET", "/healthz", nil),
		env.Do(apitest.Nobody, "GET", "/v1/runs", nil),                                      // 401
		env.Do(apitest.Client("c"), "GET", "/v1/runs/nothing", nil),                         // 404
		env.Do(apitest.Client("c"), "POST", "/v1/runs", map[string]any{"run_id": "bad id"}), // 400
	} {
		if got := resp.Headers["server-timing"]; !timing.MatchString(got) {
			t.Errorf("%d answered server-timing %q", resp.Status, got)
		}
	}
}

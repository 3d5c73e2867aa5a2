package httpapi_test

import (
	"testing"

	"mediator/localdev/apitest"
	"mediator/migrations"
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

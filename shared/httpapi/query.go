package httpapi

import (
	"net/http"

	"mediator/migrations"
)

// Query serves the read routes: runs, the queue, the fleet, leases, and /healthz.
func Query(d Deps) Handler {
	return handler(d, map[string]endpoint{
		"GET /healthz": {public: true, serve: healthz},
	})
}

// healthz answers 200 when the database answers and its schema is the one this build
// expects; 503 otherwise, saying which.
func healthz(c *call) (reply, error) {
	version, dirty, err := c.d.Store.SchemaVersion(c.ctx)
	if err != nil {
		return reply{}, err
	}
	body := map[string]any{"status": "ok", "schema_version": version, "expected_schema_version": migrations.Latest()}
	if dirty || version < migrations.Latest() {
		body["status"] = "schema behind: run the migrate function"
		return reply{http.StatusServiceUnavailable, body}, nil
	}
	return reply{http.StatusOK, body}, nil
}

// Package migrator is the migrate function's handler: it applies the embedded migrations and
// answers the schema version. Deploys invoke it once before the other functions serve.
package migrator

import (
	"context"
	"encoding/json"
	"log/slog"

	"mediator/shared/store"
)

// Result is the migrate function's answer.
type Result struct {
	SchemaVersion uint `json:"schema_version"`
}

// Handler migrates on every invocation; applying an up-to-date schema is a no-op.
func Handler(st *store.Store, log *slog.Logger) func(context.Context, json.RawMessage) (Result, error) {
	return func(ctx context.Context, _ json.RawMessage) (Result, error) {
		v, err := store.Migrate(ctx, st.Pool())
		if err != nil {
			log.Error("migrate failed", "error", err.Error())
			return Result{}, err
		}
		log.Info("migrated", "schema_version", v)
		return Result{SchemaVersion: v}, nil
	}
}

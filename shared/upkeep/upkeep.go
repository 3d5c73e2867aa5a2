// Package upkeep holds the handlers that keep Mediator running and serve no HTTP: the reap
// function's, which EventBridge invokes on a schedule, and the migrate function's, which
// deploys invoke once before the other functions serve. Neither links the HTTP handlers.
package upkeep

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/store"
)

// Reap is the reap function's handler: it runs the store's sweep once per scheduled event,
// logs the summary as one structured line and answers it.
func Reap(st *store.Store, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (store.ReapSummary, error) {
		sum, err := st.Reap(ctx)
		if err != nil {
			log.Error("reap failed", "event_id", ev.ID, "error", err.Error(), "summary", sum)
			return sum, err
		}
		log.Info("reap", "event_id", ev.ID, "expired", sum.Expired, "cancelled", sum.Cancelled,
			"timed_out", sum.TimedOut, "queue_timed_out", sum.QueueTimedOut, "retired", sum.Retired,
			"unservable", sum.Unservable, "promoted", sum.Promoted, "stranded_runs_recovered", sum.Stranded,
			"outage_grace", sum.OutageGrace, "unfinished", sum.Unfinished)
		return sum, nil
	}
}

// ScheduledEvent is the event EventBridge sends for a `rate(...)` rule, as the local timer
// and the tests send it too.
func ScheduledEvent(id string) events.EventBridgeEvent {
	return events.EventBridgeEvent{
		Version: "0", ID: id, DetailType: "Scheduled Event", Source: "aws.events",
		AccountID: "000000000000", Region: "us-east-1",
		Resources: []string{"arn:aws:events:us-east-1:000000000000:rule/mediator-reap"},
		Detail:    []byte("{}"),
	}
}

// Migrated is the migrate function's answer.
type Migrated struct {
	SchemaVersion uint `json:"schema_version"`
}

// Migrate is the migrate function's handler: it applies the embedded migrations and answers
// the schema version. It migrates on every invocation; an up-to-date schema is a no-op.
func Migrate(st *store.Store, log *slog.Logger) func(context.Context, json.RawMessage) (Migrated, error) {
	return func(ctx context.Context, _ json.RawMessage) (Migrated, error) {
		v, err := st.Migrate(ctx)
		if err != nil {
			log.Error("migrate failed", "error", err.Error())
			return Migrated{}, err
		}
		log.Info("migrated", "schema_version", v)
		return Migrated{SchemaVersion: v}, nil
	}
}

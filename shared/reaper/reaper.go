// Package reaper is the reap function's handler: EventBridge invokes it on a schedule, it runs
// the store's sweep and logs the summary as one structured line.
package reaper

import (
	"context"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/store"
)

// Handler sweeps once per scheduled event and answers the summary.
func Handler(st *store.Store, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error) {
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

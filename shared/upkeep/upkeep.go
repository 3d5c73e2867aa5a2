// Package upkeep holds the handlers that keep Mediator running and serve no HTTP: the reap
// function's, which EventBridge invokes on a schedule, and the migrate function's, which each
// deploy runs as a CloudFormation custom resource before the other functions switch to the new
// code. Neither links the HTTP handlers.
package upkeep

import (
	"context"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/startup"
	"mediator/shared/store"
)

// Reap is the reap function's handler: it runs the store's sweep once per scheduled event (the
// step logs of the runs retention prunes removed first, in a stack that keeps logs), tells the
// nodes whose work the sweep changed to look now (a hint, as a handler's, within push.Budget),
// publishes the events of the nodes whose health it moved and those handlers left unpublished,
// logs the summary as one structured line whose counts are CloudWatch metrics (metrics.go), and
// answers it.
func Reap(d startup.Deps) func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error) {
	st, log, function := d.Store, d.Log, functionName()
	var params store.ReapParams
	if d.Logs != nil {
		params.RemoveLogs = d.Logs.RemoveRun
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) (store.ReapSummary, error) {
		sum, err := st.Reap(ctx, params)
		// What the sweep committed before a failure is the nodes' to see too.
		d.Hinter.Hint(ctx, sum.Hinted...)
		if err == nil {
			// The health the sweep moved goes out now, as a handler's would; the rest once
			// stale. EventBridge being down is not the reap's failure: the events stay marked,
			// and the next reap tries again.
			own := d.Publisher.Nodes(ctx, sum.HealthChanged...)
			var perr error
			sum.Published, perr = d.Publisher.Stale(ctx)
			sum.Published += own
			if perr != nil {
				log.Warn("publishing left to the next reap", "event_id", ev.ID, "error", perr.Error())
			}
		}
		if err != nil {
			log.Error("reap failed", "event_id", ev.ID, "error", err.Error(), "summary", sum)
			return sum, err
		}
		log.Info("reap", reapAttrs(ev.ID, function, time.Now(), sum)...)
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

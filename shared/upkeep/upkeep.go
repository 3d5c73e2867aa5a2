// Package upkeep holds the handlers that keep Mediator running and serve no HTTP: the reap
// function's, which EventBridge invokes on a schedule, and the migrate function's, which each
// deploy runs as a CloudFormation custom resource before the other functions switch to the new
// code. Neither links the HTTP handlers.
package upkeep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/startup"
	"mediator/shared/store"
)

// Reap is the reap function's handler: it runs the store's sweep once per scheduled event,
// publishes the run events handlers left unpublished, logs the summary as one structured line
// and answers it.
func Reap(d startup.Deps) func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error) {
	st, log := d.Store, d.Log
	return func(ctx context.Context, ev events.EventBridgeEvent) (store.ReapSummary, error) {
		sum, err := st.Reap(ctx)
		if err == nil {
			// EventBridge being down is not the reap's failure: the events stay marked, and
			// the next reap tries again.
			var perr error
			if sum.Published, perr = d.Publisher.Stale(ctx); perr != nil {
				log.Warn("publishing left to the next reap", "event_id", ev.ID, "error", perr.Error())
			}
		}
		if err != nil {
			log.Error("reap failed", "event_id", ev.ID, "error", err.Error(), "summary", sum)
			return sum, err
		}
		log.Info("reap", "event_id", ev.ID, "expired", sum.Expired, "cancelled", sum.Cancelled,
			"timed_out", sum.TimedOut, "queue_timed_out", sum.QueueTimedOut, "retired", sum.Retired,
			"unservable", sum.Unservable, "promoted", sum.Promoted, "stranded_runs_recovered", sum.Stranded,
			"outage_grace", sum.OutageGrace, "pruned", sum.Pruned, "published", sum.Published,
			"unfinished", sum.Unfinished)
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

// Migrated is the migrate function's answer to a direct invocation.
type Migrated struct {
	SchemaVersion uint `json:"schema_version"`
}

// Migrate is the migrate function's handler. A deploy invokes it as a CloudFormation custom
// resource (cfn.Event: it answers CloudFormation at the event's ResponseURL); an operator or
// `make migrate` invokes it directly with any other JSON (it answers the schema version). It
// migrates on every Create and Update (an up-to-date schema is a no-op), and turns the event
// outbox on or off as EVENT_BUS_NAME says: the deploy that changes the setting runs it.
func Migrate(d startup.Deps) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var ev cfn.Event
		if json.Unmarshal(raw, &ev) == nil && ev.RequestType != "" && ev.ResponseURL != "" {
			return nil, migrateResource(ctx, d, ev)
		}
		v, err := migrate(ctx, d)
		return Migrated{SchemaVersion: v}, err
	}
}

func migrate(ctx context.Context, d startup.Deps) (uint, error) {
	// The application role, which the migration grants to: every other function's login.
	app, err := startup.AppRole(ctx, d.Config)
	var v uint
	if err == nil {
		v, err = d.Store.Migrate(ctx, app)
	}
	if err == nil {
		err = d.Store.SetPublishing(ctx, d.Config.EventBusName != "")
	}
	if err != nil {
		d.Log.Error("migrate failed", "error", err.Error())
		return 0, err
	}
	d.Log.Info("migrated", "schema_version", v, "publishing", d.Config.EventBusName != "")
	return v, nil
}

// SchemaResourceID is the custom resource's physical id. It never changes, so an Update is
// never taken for a replacement (CloudFormation would Delete the old one).
const SchemaResourceID = "mediator-schema"

// responseMargin is how much of the invocation a custom resource keeps for its answer: a
// CloudFormation custom resource that never answers holds the stack for an hour.
const responseMargin = 10 * time.Second

// migrateResource is the migration as a deploy's custom resource: Create and Update migrate,
// Delete keeps the schema (deleting a stack must not drop the data). Whatever happens — an
// error, a migration still running near the invocation's deadline — CloudFormation is answered
// before the deadline, FAILED with a reason or SUCCESS with the version.
func migrateResource(ctx context.Context, d startup.Deps, ev cfn.Event) error {
	resp := cfn.NewResponse(&ev)
	resp.PhysicalResourceID, resp.Status = SchemaResourceID, cfn.StatusSuccess
	if ev.RequestType != cfn.RequestDelete {
		v, err := migrateWithin(ctx, d)
		if err != nil {
			resp.Status = cfn.StatusFailed
			resp.Reason = "the migration failed: " + err.Error() + " (the migrate function's log has the details)"
		} else {
			resp.Data = map[string]any{"SchemaVersion": v}
		}
	}
	d.Log.Info("custom resource", "request", ev.RequestType, "status", resp.Status, "logical_id", ev.LogicalResourceID)
	return answer(ctx, ev.ResponseURL, resp)
}

// migrateWithin migrates, giving up waiting responseMargin before the invocation's deadline.
// A migration runs in one transaction: given up on, it still commits or rolls back whole.
func migrateWithin(ctx context.Context, d startup.Deps) (uint, error) {
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-responseMargin))
		defer cancel()
	}
	type result struct {
		v   uint
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := migrate(context.WithoutCancel(ctx), d)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return 0, errors.New("it did not finish in time; it commits or rolls back whole: deploy again")
	}
}

// answer PUTs the response to CloudFormation's pre-signed URL, within the time left.
func answer(ctx context.Context, url string, resp *cfn.Response) error {
	body, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: responseMargin}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("answer CloudFormation: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("answer CloudFormation: %s", res.Status)
	}
	return nil
}

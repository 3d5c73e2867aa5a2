// Package publish sends events to Amazon EventBridge, source "mediator": a run's change of
// state ("Run State Changed", one entry per change) and a node's change of health ("Node
// Health Changed"); the store's outboxes say what is still to send. Handlers publish their own
// runs' and nodes' events right after their COMMIT, within about a second, and a failure never
// changes their answer; the reaper publishes whatever is left. Delivery is at least once:
// consumers dedupe by detail.event_id and order a run's events by detail.seq, since
// EventBridge keeps no order.
package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"mediator/shared/store"
)

// The event's envelope, as rules match it.
const (
	Source     = "mediator"
	DetailType = "Run State Changed"
	// NodeDetailType is a node's change of health: node_health_changed.
	NodeDetailType = "Node Health Changed"
)

// NodeDetail is a node event's detail: its health went from one state to another, by whom
// (self, system, admin:<id>) and why.
type NodeDetail struct {
	EventID int64     `json:"event_id"`
	Kind    string    `json:"kind"` // node_health_changed
	NodeID  string    `json:"node_id"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  *string   `json:"reason"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// Detail is an event's detail.
type Detail struct {
	EventID  int64             `json:"event_id"`
	Seq      int64             `json:"seq"`
	RunID    string            `json:"run_id"` // as its owner named it
	Owner    string            `json:"owner"`
	RunKey   string            `json:"run_key"`  // unique across owners
	RunKind  string            `json:"run_kind"` // run, health_check or hold: what a rule matches holds by
	Kind     string            `json:"kind"`
	From     *string           `json:"from"`
	To       string            `json:"to"`
	Reason   *string           `json:"reason"`
	Attempt  int               `json:"attempt"`
	At       time.Time         `json:"at"`
	NodeID   *string           `json:"node_id"`
	Assigned map[string]string `json:"assigned"`
}

// Publisher publishes run and node events to one event bus.
type Publisher struct {
	api   *eventbridge.Client
	bus   string
	store *store.Store
	log   *slog.Logger
}

// New is a publisher to bus through api (eventbridge.NewFromConfig; its endpoint is whatever
// the SDK resolves, so AWS_ENDPOINT_URL_EVENTBRIDGE points it at a local stand-in).
func New(api *eventbridge.Client, bus string, st *store.Store, log *slog.Logger) *Publisher {
	return &Publisher{api: api, bus: bus, store: st, log: log}
}

// HandlerBudget bounds a handler's publishing: a dead endpoint must not slow an answer. A
// handler that publishes both runs' and nodes' events gives both this one budget.
const HandlerBudget = time.Second

// Runs publishes the unpublished events of these runs — a handler's own — within about a
// second. What it could not send stays marked, and the reaper sends it.
func (p *Publisher) Runs(ctx context.Context, runIDs ...string) {
	if p == nil || len(runIDs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, HandlerBudget)
	defer cancel()
	events, err := p.store.ClaimEventsOfRuns(ctx, runIDs, maxClaim)
	if err == nil {
		_, err = p.send(ctx, events)
	}
	if err != nil {
		p.log.Warn("publishing left to the reaper", "runs", runIDs, "error", err.Error())
	}
}

// Nodes publishes the unpublished events of these nodes — the health changes a handler (or
// the reap) made — within about a second, and says how many it sent. What it could not send
// stays marked, and the reaper sends it.
func (p *Publisher) Nodes(ctx context.Context, nodeIDs ...string) int {
	if p == nil || len(nodeIDs) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, HandlerBudget)
	defer cancel()
	events, err := p.store.ClaimEventsOfNodes(ctx, nodeIDs, maxClaim)
	sent := 0
	if err == nil {
		sent, err = p.sendNodes(ctx, events)
	}
	if err != nil {
		p.log.Warn("publishing left to the reaper", "nodes", nodeIDs, "error", err.Error())
	}
	return sent
}

// staleAfter is how long the reaper leaves an event to the handler that wrote it.
const staleAfter = 30 * time.Second

// maxClaim bounds one claim: the reaper's batch, and more than any handler's own runs write.
const maxClaim = 200

// reapMargin is how much of its invocation the reaper keeps after publishing.
const reapMargin = 3 * time.Second

// Stale publishes the events left unpublished for longer than staleAfter, in batches, until
// none is left or the invocation's deadline nears. It says how many were sent.
func (p *Publisher) Stale(ctx context.Context) (int, error) {
	if p == nil {
		return 0, nil
	}
	sent := 0
	for {
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < reapMargin {
			return sent, nil
		}
		events, err := p.store.ClaimStaleEvents(ctx, staleAfter, maxClaim)
		if err != nil {
			return sent, err
		}
		if len(events) == 0 {
			n, err := p.staleNodes(ctx)
			return sent + n, err
		}
		n, err := p.send(ctx, events)
		sent += n
		if err != nil {
			return sent, err
		}
	}
}

// staleNodes publishes the node events left unpublished for longer than staleAfter, in batches
// while the deadline allows.
func (p *Publisher) staleNodes(ctx context.Context) (int, error) {
	sent := 0
	for {
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < reapMargin {
			return sent, nil
		}
		events, err := p.store.ClaimStaleNodeEvents(ctx, staleAfter, maxClaim)
		if err != nil || len(events) == 0 {
			return sent, err
		}
		n, err := p.sendNodes(ctx, events)
		sent += n
		if err != nil {
			return sent, err
		}
	}
}

// sendNodes publishes node events; see sendAll.
func (p *Publisher) sendNodes(ctx context.Context, events []store.OutboundNodeEvent) (int, error) {
	entries := make([]outgoing, len(events))
	for i, e := range events {
		detail, err := json.Marshal(NodeDetail{EventID: e.EventID, Kind: "node_health_changed", NodeID: e.NodeID,
			From: e.From, To: e.To, Reason: e.Reason, By: e.By, At: e.At})
		if err != nil {
			return 0, err
		}
		entries[i] = outgoing{e.EventID, p.entry(NodeDetailType, detail, e.At)}
	}
	return p.sendAll(ctx, entries, p.store.MarkNodeEventsPublished)
}

// entriesPerCall is PutEvents' limit.
const entriesPerCall = 10

// outgoing is one entry to send, by the id of the event its outbox clears once it is accepted.
type outgoing struct {
	id    int64
	entry types.PutEventsRequestEntry
}

// runEntries are run events as EventBridge entries.
func (p *Publisher) runEntries(events []store.OutboundEvent) ([]outgoing, error) {
	out := make([]outgoing, len(events))
	for i, e := range events {
		detail, err := json.Marshal(Detail{EventID: e.EventID, Seq: e.Seq, RunID: e.RunID, Owner: e.Owner, RunKey: e.RunKey,
			RunKind: e.RunKind, Kind: e.Kind, From: e.From, To: e.To, Reason: e.Reason, Attempt: e.Attempt, At: e.At,
			NodeID: e.NodeID, Assigned: e.Assigned})
		if err != nil {
			return nil, err
		}
		out[i] = outgoing{e.EventID, p.entry(DetailType, detail, e.At)}
	}
	return out, nil
}

func (p *Publisher) entry(detailType string, detail []byte, at time.Time) types.PutEventsRequestEntry {
	return types.PutEventsRequestEntry{
		EventBusName: aws.String(p.bus), Source: aws.String(Source), DetailType: aws.String(detailType),
		Detail: aws.String(string(detail)), Time: aws.Time(at),
	}
}

// send publishes run events; see sendAll.
func (p *Publisher) send(ctx context.Context, events []store.OutboundEvent) (int, error) {
	entries, err := p.runEntries(events)
	if err != nil {
		return 0, err
	}
	return p.sendAll(ctx, entries, p.store.MarkPublished)
}

// sendAll publishes entries in calls of up to ten, resending the entries EventBridge refused
// (FailedEntryCount: throttled, an internal failure) with backoff while ctx allows, and clears
// the mark of every accepted one (mark). It says how many were accepted.
func (p *Publisher) sendAll(ctx context.Context, entries []outgoing, mark func(context.Context, []int64) error) (int, error) {
	accepted := 0
	for len(entries) > 0 {
		n := min(entriesPerCall, len(entries))
		ok, err := p.put(ctx, entries[:n])
		if markErr := mark(context.WithoutCancel(ctx), ok); markErr != nil && err == nil {
			err = markErr
		}
		accepted += len(ok)
		if err != nil {
			return accepted, err
		}
		entries = entries[n:]
	}
	return accepted, nil
}

// putTries bounds the calls for one batch: past them, the reaper's next sweep tries again.
const putTries = 5

// put sends one call's worth of entries until each is accepted, ctx ends or putTries calls
// were made; it answers the ids of those accepted.
func (p *Publisher) put(ctx context.Context, events []outgoing) ([]int64, error) {
	var ok []int64
	for try := 1; ; try++ {
		entries := make([]types.PutEventsRequestEntry, len(events))
		for i, e := range events {
			entries[i] = e.entry
		}
		out, err := p.api.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		var refused []outgoing
		if err == nil {
			for i, r := range out.Entries {
				if r.EventId != nil && r.ErrorCode == nil {
					ok = append(ok, events[i].id)
				} else {
					refused = append(refused, events[i])
				}
			}
			if len(out.Entries) != len(events) { // not what the API promises: resend the rest
				refused = append(refused, events[len(out.Entries):]...)
			}
			if len(refused) == 0 {
				return ok, nil
			}
			events = refused
		}
		if try == putTries || !sleep(ctx, backoff(try)) {
			if err == nil {
				err = fmt.Errorf("publish: %d entries refused (%s)", len(refused), code(out, len(refused)))
			}
			return ok, err
		}
	}
}

func code(out *eventbridge.PutEventsOutput, refused int) string {
	for _, r := range out.Entries {
		if r.ErrorCode != nil {
			return *r.ErrorCode
		}
	}
	return fmt.Sprintf("%d without an answer", refused)
}

// backoff is the wait before try+1: exponential from 50 ms, full jitter, at most 2 s.
func backoff(try int) time.Duration {
	ceiling := min(50*time.Millisecond<<min(try, 6), 2*time.Second)
	return time.Duration(rand.Int64N(int64(ceiling)) + 1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

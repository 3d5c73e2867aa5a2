package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// clientToken is the development client every run of the demo belongs to.
const clientToken = "dev-client"

// api is the demo's client side of the HTTP API.
type api struct {
	*client.Client
}

// await reads a run every pollEvery until ok holds, or fails after awaitTimeout with the run
// as it last stood. Polling is what a demo can afford; clients of a real fleet would too.
func (a *api) await(ctx context.Context, runID, want string, ok func(client.Run) bool) (*client.RunDetail, error) {
	const pollEvery, awaitTimeout = 100 * time.Millisecond, 30 * time.Second
	wait, cancel := context.WithTimeout(ctx, awaitTimeout)
	defer cancel()
	last := &client.RunDetail{}
	for {
		r, err := a.GetRun(wait, runID)
		if err == nil && ok(r.Run) {
			return r, nil
		}
		if err == nil {
			last = r
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return last, ctx.Err() // the whole demo is ending, not this wait
			}
			return last, fmt.Errorf("run %s: expected %s within %s, got %s", runID, want, awaitTimeout, describe(last.Run))
		case <-time.After(pollEvery):
		}
	}
}

// describe is a run's state in one phrase: "RUNNING on rpi-A", "QUEUED (queue position 0)",
// "FAILED no_capable_node".
func describe(r client.Run) string {
	if r.RunID == "" {
		return "no answer"
	}
	s := r.State
	if r.Reason != nil {
		s += " " + *r.Reason
	}
	if on := nodes(r); on != "" && r.State == wire.Running {
		s += " on " + on
	}
	if r.QueuePosition != nil {
		s += fmt.Sprintf(" (queue position %d)", *r.QueuePosition)
	}
	return s
}

// nodes lists the nodes a run holds, by role name order for one stable phrase: "rpi-A" for
// one role, "dut=rpi-A, host=host-B" for several.
func nodes(r client.Run) string {
	var on []string
	for _, role := range slices.Sorted(maps.Keys(r.Assigned)) {
		if len(r.Assigned) == 1 {
			on = append(on, r.Assigned[role])
		} else {
			on = append(on, role+"="+r.Assigned[role])
		}
	}
	return strings.Join(on, ", ")
}

// stepState is the state of one step of a run ("" when it has no such step).
func stepState(r client.Run, id string) string {
	for _, s := range r.Steps {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

// outputs are a step's outputs as key=value, by key order ("" when it has none).
func outputs(r client.Run, id string) string {
	for _, s := range r.Steps {
		if s.ID == id {
			var kv []string
			for _, k := range slices.Sorted(maps.Keys(s.Outputs)) {
				kv = append(kv, k+"="+s.Outputs[k])
			}
			return strings.Join(kv, ", ")
		}
	}
	return ""
}

// message is the end of what a step printed, as its node reported it.
func message(r client.Run, id string) string {
	for _, s := range r.Steps {
		if s.ID == id && s.Message != nil {
			return strings.TrimSpace(*s.Message)
		}
	}
	return ""
}

// line is one history event as the demo prints it.
func line(e client.Event) string {
	s := e.Kind + " "
	if e.From != nil {
		s += *e.From + " "
	}
	s += "-> " + e.To
	if e.Reason != nil {
		s += " " + *e.Reason
	}
	if e.NodeID != nil {
		s += " (" + *e.NodeID + ")"
	}
	return fmt.Sprintf("attempt %d: %s", e.Attempt, s)
}

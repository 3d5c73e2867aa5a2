package httpapi

import (
	"net/http"
	"slices"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/startup"
)

// Result serves POST /v1/runs/{run_id}/steps/{step_id}/result.
func Result(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{"POST /v1/runs/{run_id}/steps/{step_id}/result": {serve: result}})
}

// result applies a node's step report. Only the node the step is assigned to may report, under
// the lease it holds; anything else is 409 stale_assignment and the node must drop the work.
func result(c *call) (reply, error) {
	if err := c.allow(auth.Node); err != nil {
		return reply{}, err
	}
	runID, err := c.pathID("run_id")
	if err != nil {
		return reply{}, err
	}
	stepID, err := c.pathID("step_id", request.StepIDPattern)
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
	if err != nil {
		return reply{}, err
	}
	p, prob := request.Result(runID, stepID, body)
	if prob != nil {
		return reply{}, prob
	}
	if p.NodeID != c.who.ID {
		return reply{}, problem.New(problem.Forbidden, "a node reports only as itself")
	}
	res, err := c.d.Store.Report(c.ctx, p)
	if err != nil {
		return reply{}, err
	}
	answer := map[string]any{
		"run_id": runID, "step_id": stepID, "step_state": res.StepState, "run_state": res.RunState,
		"next": res.Next,
	}
	// A rollback (retry) releases nothing, so it never wakes. When this report freed the node,
	// the wake prefers it, and when the wake placed a run on it the answer hands the node that
	// run, so a busy node goes from one run to the next without waiting for its next heartbeat.
	// (A run another wake placed on it meanwhile comes with that heartbeat.)
	if woke := c.afterCommit([]string{runID}, res.CapacityAppeared, p.NodeID); slices.Contains(woke.Placed, p.NodeID) {
		if lease, steps, err := c.d.Store.NodeWork(c.ctx, p.NodeID, p.BootID); err == nil && lease != nil {
			answer["next_run"] = map[string]any{"lease": lease, "steps": steps}
		}
	}
	return reply{http.StatusOK, answer}, nil
}

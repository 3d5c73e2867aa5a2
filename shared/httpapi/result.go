package httpapi

import (
	"net/http"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Result serves the node's calls about the steps it runs: POST
// /v1/runs/{run_id}/steps/{step_id}/result and .../log-urls.
func Result(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{
		"POST /v1/runs/{run_id}/steps/{step_id}/result":   {serve: result},
		"POST /v1/runs/{run_id}/steps/{step_id}/log-urls": {serve: logURLs},
	})
}

// nodeStepCall is what every node route on one step starts with: the caller a node, the run
// and the step of the path, and the body.
func (c *call) nodeStepCall() (runID, stepID string, body []byte, err error) {
	if err = c.allow(auth.Node); err != nil {
		return "", "", nil, err
	}
	if runID, err = c.pathID("run_id"); err != nil {
		return "", "", nil, err
	}
	if stepID, err = c.pathID("step_id", wire.NamePattern); err != nil {
		return "", "", nil, err
	}
	body, err = c.body()
	return runID, stepID, body, err
}

// result applies a node's step report. Only the node the step is assigned to may report, under
// the lease it holds; anything else is 409 stale_assignment and the node must drop the work.
func result(c *call) (reply, error) {
	runID, stepID, body, err := c.nodeStepCall()
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
	// A started try's first upload URLs, so that a short step costs no call of its own for them.
	if up := c.firstLogURLs(res.Log); up != nil {
		answer["log"] = up
	}
	// A rollback (retry) releases nothing, so it never wakes. When this report freed the node,
	// the wake prefers it — while the queue waits for nodes the report holds it for this wake
	// alone — and when the wake placed a run on it the answer hands the node that run, so a
	// busy node goes from one run to the next without waiting for its next heartbeat. (A run
	// another wake placed on it comes with that heartbeat.)
	freed := store.WakeParams{Prefer: []string{p.NodeID}, Held: res.Held, Read: res.Read,
		HandOver: &store.NodeAtBoot{NodeID: p.NodeID, BootID: p.BootID}}
	c.hintNodes(res.RunMates...)
	changed := []string{runID}
	if res.DebugHold != nil {
		changed = append(changed, *res.DebugHold)
	}
	if next := c.afterCommit(changed, res.CapacityAppeared, freed, res.HealthChanged...).HandedOver; next != nil {
		answer["next_run"] = map[string]any{"lease": next.Lease, "steps": next.Steps}
	}
	return reply{http.StatusOK, answer}, nil
}

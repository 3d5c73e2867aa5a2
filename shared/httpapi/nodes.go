package httpapi

import (
	"net/http"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/push"
	"mediator/shared/request"
	"mediator/shared/startup"
	"mediator/shared/store"
)

// Nodes serves the node routes: the heartbeat, removal from the fleet, and an admin's drain.
func Nodes(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{
		"PUT /v1/nodes/{node_id}":               {serve: heartbeat},
		"DELETE /v1/nodes/{node_id}":            {serve: removeNode},
		"POST /v1/nodes/{node_id}/drain":        {serve: drainNode},
		"DELETE /v1/nodes/{node_id}/drain":      {serve: undrainNode},
		"POST /v1/nodes/{node_id}/quarantine":   {serve: quarantineNode},
		"DELETE /v1/nodes/{node_id}/quarantine": {serve: unquarantineNode},
		"PUT /v1/health-checks/{name}":          {serve: putHealthCheck},
		"DELETE /v1/health-checks/{name}":       {serve: deleteHealthCheck},
	})
}

// heartbeat registers or refreshes the node's advert, renews its lease, and answers with its
// steps. It wakes the queue only when this heartbeat made capacity appear.
func heartbeat(c *call) (reply, error) {
	nodeID, err := c.nodeSelf()
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
	if err != nil {
		return reply{}, err
	}
	p, errs := request.Heartbeat(nodeID, body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	res, err := c.d.Store.Heartbeat(c.ctx, p)
	if err != nil {
		return reply{}, err
	}
	if res.Lease != nil {
		c.runID = res.Lease.RunID
	}
	c.hintNodes(res.RunMates...)
	c.afterCommit(res.Runs, res.CapacityAppeared, store.WakeParams{}, res.HealthChanged...)
	steps := res.Steps
	if steps == nil {
		steps = []store.NodeStep{}
	}
	answer := map[string]any{
		"node": res.Node, "lease": res.Lease, "steps": steps,
		"next_heartbeat_seconds": int(c.d.Config.HeartbeatEvery().Seconds()),
	}
	if u := c.d.Config.Push.URL; u != "" {
		answer["push"] = map[string]any{"url": u, "topic": push.Topic(nodeID)}
	}
	return reply{http.StatusOK, answer}, nil
}

// removeNode takes a node out of the fleet (admin). Its lease, if any, is released.
func removeNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	res, err := c.d.Store.RemoveNode(c.ctx, nodeID)
	if err != nil {
		return reply{}, err
	}
	c.hintNodes(res.RunMates...)
	c.afterCommit(res.Runs, res.CapacityAppeared, store.WakeParams{})
	return reply{http.StatusOK, map[string]any{"node_id": nodeID, "released": res.Released, "runs_failed": res.Unservable}}, nil
}

// drainNode stops new work going to a node (admin), as `nomad node drain` does: it finishes
// what it holds, and its own heartbeat cannot lift the drain. No wake: it makes no room.
func drainNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	n, err := c.d.Store.DrainNode(c.ctx, nodeID, c.who.Owner())
	if err != nil {
		return reply{}, err
	}
	c.hintNodes(nodeID)
	c.sendHints(store.WakeResult{}, store.WakeParams{})
	return reply{http.StatusOK, map[string]any{"node": n}}, nil
}

// undrainNode lifts an admin's drain; a node that is available again wakes the queue.
func undrainNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	res, err := c.d.Store.UndrainNode(c.ctx, nodeID)
	if err != nil {
		return reply{}, err
	}
	c.afterCommit(nil, res.CapacityAppeared, store.WakeParams{Prefer: []string{nodeID}})
	return reply{http.StatusOK, map[string]any{"node": res.Node}}, nil
}

// quarantineNode takes a node out of scheduling for its health (admin): it finishes what it
// holds, takes no new lease, and only an admin lifts it. No wake: it makes no room.
func quarantineNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
	if err != nil {
		return reply{}, err
	}
	reason, errs := request.Quarantine(body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	res, err := c.d.Store.QuarantineNode(c.ctx, nodeID, c.who.Owner(), reason)
	if err != nil {
		return reply{}, err
	}
	c.afterCommit(nil, false, store.WakeParams{}, res.HealthChanged...)
	return reply{http.StatusOK, map[string]any{"node": res.Node}}, nil
}

// unquarantineNode lifts any quarantine (admin): the node is healthy again, its count reset,
// and a node available again wakes the queue, as an undrain does.
func unquarantineNode(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return reply{}, err
	}
	res, err := c.d.Store.LiftQuarantine(c.ctx, nodeID, c.who.Owner())
	if err != nil {
		return reply{}, err
	}
	c.afterCommit(nil, res.CapacityAppeared, store.WakeParams{Prefer: []string{nodeID}}, res.HealthChanged...)
	return reply{http.StatusOK, map[string]any{"node": res.Node}}, nil
}

// putHealthCheck registers a health check, or replaces it (admin): 201 when new, 200 else.
func putHealthCheck(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	name, err := c.pathID("name")
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
	if err != nil {
		return reply{}, err
	}
	p, errs := request.HealthCheck(name, body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	check, created, err := c.d.Store.PutHealthCheck(c.ctx, p, c.who.Owner())
	if err != nil {
		return reply{}, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return reply{status, map[string]any{"health_check": check}}, nil
}

// deleteHealthCheck removes a health check (admin).
func deleteHealthCheck(c *call) (reply, error) {
	if err := c.allow(auth.Admin); err != nil {
		return reply{}, err
	}
	name, err := c.pathID("name")
	if err != nil {
		return reply{}, err
	}
	check, err := c.d.Store.DeleteHealthCheck(c.ctx, name)
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, map[string]any{"health_check": check}}, nil
}

// nodeSelf is the node id of a node route, which only that node (or an admin) may use.
func (c *call) nodeSelf() (string, error) {
	if err := c.allow(auth.Node, auth.Admin); err != nil {
		return "", err
	}
	nodeID, err := c.pathID("node_id")
	if err != nil {
		return "", err
	}
	if c.who.Kind == auth.Node && c.who.ID != nodeID {
		return "", problem.New(problem.Forbidden, "a node may only act as itself")
	}
	return nodeID, nil
}

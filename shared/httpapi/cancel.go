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

// Cancel serves the routes that change a live run from outside: POST /v1/runs/{run_id}/cancel,
// an admin's POST /v1/runs/{run_id}/priority, and a hold's POST /v1/runs/{run_id}/release and
// /extend.
func Cancel(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{
		"POST /v1/runs/{run_id}/cancel":   {query: []string{"owner"}, serve: cancel},
		"POST /v1/runs/{run_id}/priority": {query: []string{"owner"}, serve: setPriority},
		"POST /v1/runs/{run_id}/release":  {query: []string{"owner"}, serve: releaseHold},
		"POST /v1/runs/{run_id}/extend":   {query: []string{"owner"}, serve: extendHold},
	})
}

// releaseHold ends a hold at its owner's word (or an admin's): placed, SUCCEEDED and its nodes
// free, the queue woken before the answer; queued, CANCELLED.
func releaseHold(c *call) (reply, error) {
	ref, body, err := c.onRun(auth.Client, auth.Admin)
	if err != nil {
		return reply{}, err
	}
	if errs := request.Release(body); errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	res, err := c.d.Store.ReleaseHold(c.ctx, ref)
	if err != nil {
		return reply{}, err
	}
	c.hintRun(res.Run)
	c.afterCommit([]string{res.Run.StoreKey()}, res.CapacityAppeared, store.WakeParams{})
	return reply{http.StatusOK, runBody(res.Run)}, nil
}

// extendHold moves a live hold's end later, to at most MAX_HOLD_SECONDS from now.
func extendHold(c *call) (reply, error) {
	ref, body, err := c.onRun(auth.Client, auth.Admin)
	if err != nil {
		return reply{}, err
	}
	seconds, errs := request.Extend(body, c.d.Store.MaxHold())
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	res, err := c.d.Store.ExtendHold(c.ctx, ref, seconds)
	if err != nil {
		return reply{}, err
	}
	c.afterCommit([]string{res.Run.StoreKey()}, false, store.WakeParams{})
	return reply{http.StatusOK, runBody(res.Run)}, nil
}

// setPriority changes a queued run's priority (admins); the change is in the run's history, and
// the queue is woken, since the run may now go before others.
func setPriority(c *call) (reply, error) {
	ref, body, err := c.onRun(auth.Admin)
	if err != nil {
		return reply{}, err
	}
	priority, errs := request.Priority(body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	res, err := c.d.Store.SetPriority(c.ctx, ref, priority)
	if err != nil {
		return reply{}, err
	}
	c.afterCommit([]string{res.Run.StoreKey()}, res.CapacityAppeared, store.WakeParams{})
	if res.Run.State == wire.Queued && res.CapacityAppeared {
		// The answer says where it stands now, its own wake included.
		if now, err := c.d.Store.GetRunByKey(c.ctx, res.Run.StoreKey(), c.viewer()); err == nil {
			res.Run = now
		}
	}
	return reply{http.StatusOK, runBody(res.Run)}, nil
}

// cancel: a QUEUED run is CANCELLED at once (200); a RUNNING one is asked to stop (202) and
// settles when its nodes acknowledge, or at once with force (admins, 200).
func cancel(c *call) (reply, error) {
	ref, body, err := c.onRun(auth.Client, auth.Admin)
	if err != nil {
		return reply{}, err
	}
	reason, force, errs := request.Cancel(body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	if force && !c.who.IsAdmin() {
		return reply{}, problem.New(problem.Forbidden, "only an admin may force a cancel")
	}
	res, err := c.d.Store.Cancel(c.ctx, store.CancelParams{Run: ref, Reason: reason, Force: force})
	if err != nil {
		return reply{}, err
	}
	var checked store.ChecksFinished
	if node := res.Run.CheckedNode(); node != "" && res.Settled {
		// A cancelled check leaves its node's health as it was, and the node open to other work
		// again. Should this fail, the reaper's sweep does it; until then the node takes nothing.
		if checked, err = c.d.Store.FinishHealthChecks(c.ctx, []string{node}); err != nil {
			c.d.Log.Warn("health check not finished", "request_id", c.req.RequestContext.RequestID, "node_id", node, "error", err.Error())
		}
		res.CapacityAppeared = res.CapacityAppeared || len(checked.Opened) > 0
	}
	// Its nodes stop the steps they run at once, not at their next heartbeat.
	c.hintRun(res.Run)
	c.afterCommit([]string{res.Run.StoreKey()}, res.CapacityAppeared, store.WakeParams{}, checked.HealthChanged...)
	if res.Settled {
		return reply{http.StatusOK, runBody(res.Run)}, nil
	}
	return reply{http.StatusAccepted, runBody(res.Run)}, nil
}

// onRun starts a route that changes one run from outside: a caller of kinds, the run it names
// (as the caller may see it), and the request's body.
func (c *call) onRun(kinds ...auth.Kind) (store.RunRef, []byte, error) {
	if err := c.allow(kinds...); err != nil {
		return store.RunRef{}, nil, err
	}
	ref, err := c.runRef()
	if err != nil {
		return store.RunRef{}, nil, err
	}
	body, err := c.body()
	return ref, body, err
}

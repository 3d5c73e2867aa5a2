package httpapi

import (
	"net/http"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/startup"
	"mediator/shared/store"
)

// Cancel serves POST /v1/runs/{run_id}/cancel.
func Cancel(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{"POST /v1/runs/{run_id}/cancel": {serve: cancel}})
}

// cancel: a QUEUED run is CANCELLED at once (200); a RUNNING one is asked to stop (202) and
// settles when its nodes acknowledge, or at once with force (admins, 200).
func cancel(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	runID, err := c.pathID("run_id")
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
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
	res, err := c.d.Store.Cancel(c.ctx, store.CancelParams{RunID: runID, Viewer: c.viewer(), Reason: reason, Force: force})
	if err != nil {
		return reply{}, err
	}
	if res.CapacityAppeared {
		c.wake()
	}
	if res.Settled {
		return reply{http.StatusOK, runBody(res.Run)}, nil
	}
	return reply{http.StatusAccepted, runBody(res.Run)}, nil
}

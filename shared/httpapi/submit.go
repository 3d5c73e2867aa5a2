package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"mediator/shared/auth"
	"mediator/shared/match"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/startup"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// Submit serves POST /v1/runs.
func Submit(d startup.Deps) Handler {
	return handler(d, map[string]endpoint{"POST /v1/runs": {query: []string{"dry_run"}, serve: submit}})
}

// unmet is a role no node of the fleet could ever serve.
type unmet struct {
	Role  string   `json:"role"`
	Needs []string `json:"needs"`
}

func submit(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	dry, err := c.flag("dry_run")
	if err != nil {
		return reply{}, err
	}
	body, err := c.body()
	if err != nil {
		return reply{}, err
	}
	run, errs := request.Submit(body)
	for field, v := range map[string]*int{"hold_seconds": run.HoldSeconds, "keep_on_failure_seconds": run.KeepOnFailureSeconds} {
		if errs == nil && v != nil && *v > c.d.Config.MaxHoldSeconds {
			errs = []problem.FieldError{{Path: field, Message: fmt.Sprintf("must be at most %d (MAX_HOLD_SECONDS)", c.d.Config.MaxHoldSeconds)}}
		}
	}
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	c.runID = run.RunID
	run.Owner = c.who.Owner()
	if run.Priority > c.d.Config.MaxClientPriority && !c.who.IsAdmin() {
		return reply{}, problem.New(problem.Forbidden, fmt.Sprintf("a client's run may have a priority of at most %d; higher is for admins", c.d.Config.MaxClientPriority))
	}
	if dry {
		v, err := c.d.Store.DryRun(c.ctx, run)
		if err != nil {
			return reply{}, err
		}
		return reply{http.StatusOK, map[string]any{
			"verdict": v.Verdict, "assigned": nonNil(v.Assigned), "unmet": unmetRoles(v.Unmet), "width": v.Width,
		}}, nil
	}
	res, err := c.d.Store.Submit(c.ctx, run)
	if err != nil {
		return reply{}, err
	}
	// After the commit, when the run was queued: queued at the moment another handler freed
	// its node, it would otherwise be missed by both. The wake starts from the queue as the
	// submit read it, with the run in it, and may place the run in its turn: then it is
	// answered as placed, as the promotion left it. A run placed, refused or submitted before
	// took no node from the queue and freed none: no wake.
	woke := c.afterCommit([]string{res.Run.StoreKey()}, res.Outcome == store.Waiting, res.Wake)
	if p, promoted := woke.Promotion(res.Run.StoreKey()); promoted && res.Outcome == store.Waiting {
		res = res.Promoted(p)
	}
	res.Run = res.Run.ShownTo(c.viewer())
	switch res.Outcome {
	case store.Placed:
		return reply{http.StatusCreated, runBody(res.Run)}, nil
	case store.Waiting:
		runs := []store.Run{res.Run}
		if err := c.explainWaiting(runs); err != nil {
			return reply{}, err
		}
		return reply{http.StatusAccepted, map[string]any{"run": runs[0], "warnings": queuedWarnings(runs[0].Waiting)}}, nil
	case store.Unservable:
		return reply{http.StatusUnprocessableEntity, map[string]any{"run": res.Run, "unmet": unmetRoles(res.Unmet)}}, nil
	default:
		return reply{http.StatusOK, runBody(res.Run)}, nil
	}
}

func runBody(r store.Run) map[string]any { return map[string]any{"run": r} }

func unmetRoles(roles []match.Role) []unmet {
	out := []unmet{}
	for _, r := range roles {
		out = append(out, unmet{Role: r.Name, Needs: r.Needs})
	}
	return out
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// warning is something a client should know of a request that was accepted.
type warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// queuedWarnings are what a submit that queued warns of: a role no live node could serve, the
// run waiting for one to come back or join (an empty list when none).
func queuedWarnings(w *store.WhyWaiting) []warning {
	out := []warning{}
	if w == nil {
		return out
	}
	for _, r := range w.Roles {
		needs := strings.Join(r.Needs, ", ")
		switch {
		case r.Total() == 0:
			out = append(out, warning{Code: wire.WaitForCapacity, Message: fmt.Sprintf(
				"no node of the fleet can serve role %q (needs %s): the run waits for one to join", r.Role, needs)})
		case r.Live() == 0:
			offline := fmt.Sprintf("all %d nodes that could are offline", r.Offline)
			if r.Offline == 1 {
				offline = "the one node that could is offline"
			}
			out = append(out, warning{Code: wire.WaitNoLiveNode, Message: fmt.Sprintf(
				"no live node can serve role %q (needs %s): %s", r.Role, needs, offline)})
		}
	}
	return out
}

package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"mediator/shared/auth"
	"mediator/shared/problem"
	"mediator/shared/request"
	"mediator/shared/steplogs"
	"mediator/shared/store"
	"mediator/shared/wire"
)

// logURLs serves POST /v1/runs/{run_id}/steps/{step_id}/log-urls: a batch of upload URLs for
// the log of a step the node runs, fenced as its reports are. A node that lost its lease (the
// run ended or was requeued, the node restarted) gets 409 and no URL, so it can write nothing
// under a later lease's keys; the URLs it already holds name keys of its own lease's attempt,
// try and epoch, which no reader takes for a later attempt's log.
func logURLs(c *call) (reply, error) {
	runID, stepID, body, err := c.nodeStepCall()
	if err != nil {
		return reply{}, err
	}
	p, errs := request.LogURLs(runID, stepID, body)
	if errs != nil {
		return reply{}, problem.Invalid(errs)
	}
	if p.NodeID != c.who.ID {
		return reply{}, problem.New(problem.Forbidden, "a node asks for upload URLs only as itself")
	}
	if c.d.Logs == nil {
		return reply{}, problem.New(problem.LogsNotStored, "this stack keeps no step logs (LOG_BUCKET is empty): upload nothing, keep the local copy")
	}
	target, err := c.d.Store.LogUploadTarget(c.ctx, p)
	if err != nil {
		return reply{}, err
	}
	up, err := c.d.Logs.UploadURLs(c.ctx, target, p.From, p.Count)
	if err != nil {
		return reply{}, c.bucketUnavailable(err)
	}
	return reply{http.StatusOK, up}, nil
}

// firstLogURLs is the first batch of upload URLs for the try a started report began, for its
// answer (nil in a stack without logs). A failure leaves it out: the report is committed, and
// the node asks log-urls for the URLs instead.
func (c *call) firstLogURLs(t *store.LogTarget) *steplogs.Upload {
	if t == nil || c.d.Logs == nil {
		return nil
	}
	up, err := c.d.Logs.UploadURLs(c.ctx, *t, 0, wire.LogURLsFirstBatch)
	if err != nil {
		c.d.Log.Warn("no upload URLs in the started answer", "request_id", c.req.RequestContext.RequestID, "error", err.Error())
		return nil
	}
	return &up
}

// stepLog serves GET /v1/runs/{run_id}/steps/{step_id}/log: the log as it stands, for the
// run's owner and admins; to anyone else the run does not exist (the same 404 as GET
// /v1/runs/{run_id}).
func stepLog(c *call) (reply, error) {
	if err := c.allow(auth.Client, auth.Admin); err != nil {
		return reply{}, err
	}
	ref, err := c.runRef()
	if err != nil {
		return reply{}, err
	}
	stepID, err := c.pathID("step_id", wire.NamePattern)
	if err != nil {
		return reply{}, err
	}
	attempt := 0
	if raw, given := c.query["attempt"]; given {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > wire.MaxAttempts {
			return reply{}, problem.Invalid([]problem.FieldError{{Path: "attempt", Message: fmt.Sprintf("must be a whole number from 1 to %d (omit it for the run's latest)", wire.MaxAttempts)}})
		}
		attempt = n
	}
	var from int64
	if raw, given := c.query["from"]; given {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != raw {
			return reply{}, problem.Invalid([]problem.FieldError{{Path: "from", Message: "must be a byte offset of the log: a whole number, 0 or more"}})
		}
		from = n
	}
	facts, err := c.d.Store.StepLogFacts(c.ctx, store.StepLogParams{Run: ref, StepID: stepID, Attempt: attempt})
	if err != nil {
		return reply{}, err
	}
	if c.d.Logs == nil {
		return reply{http.StatusOK, steplogs.NotStored(facts)}, nil
	}
	log, err := c.d.Logs.Read(c.ctx, facts, from)
	if err != nil {
		return reply{}, c.bucketUnavailable(err)
	}
	return reply{http.StatusOK, log}, nil
}

// bucketUnavailable is a failure to reach the log bucket (S3 throttling or down, credentials
// not to be had): transient, so 503 for the caller to come back; what failed goes to the log
// only.
func (c *call) bucketUnavailable(err error) error {
	c.d.Log.Error("the log bucket failed", "request_id", c.req.RequestContext.RequestID, "route", c.req.RouteKey, "error", err.Error())
	return problem.New(problem.Unavailable, "the log bucket could not be reached; try again")
}

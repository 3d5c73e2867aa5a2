package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/client"
	"mediator/shared/wire"
)

// stack is a test's Mediator — its own database, the real handlers behind the local gateway —
// with front in the way of every request, to play the network's part.
func stack(t *testing.T, front func(gw http.Handler) http.Handler) (*apitest.Env, string) {
	t.Helper()
	env := apitest.New(t)
	if front == nil {
		return env, env.Serve()
	}
	return env, env.Serve(front)
}

func dial(t *testing.T, base, token string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, append([]client.Option{client.WithToken(token),
		client.WithRetry(client.Retry{BaseDelay: 1, MaxDelay: 1})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The connection drops after Mediator stored the run and before the client heard: the client's
// retry submits the same request again, and gets the run that was stored (200), not a second
// one and not a conflict.
func TestAResubmitAfterADroppedConnectionGetsTheSameRun(t *testing.T) {
	t.Parallel()
	var submits atomic.Int32
	var firstAnswer int
	env, base := stack(t, func(gw http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/runs" || submits.Add(1) > 1 {
				gw.ServeHTTP(w, r)
				return
			}
			// The gateway commits the submit; its answer is lost with the connection.
			rec := httptest.NewRecorder()
			gw.ServeHTTP(rec, r)
			firstAnswer = rec.Code
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = conn.Close()
		})
	})
	env.Heartbeat("n1", "b1", false, "board=rpi4")
	api := dial(t, base, "dev-client")
	s, err := api.Submit(context.Background(), client.RunRequest{RunID: "r1", Needs: []string{"board=rpi4"},
		Steps: []client.StepRequest{{ID: "s", Spec: map[string]any{"duration": "1s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if submits.Load() != 2 || firstAnswer != http.StatusCreated {
		t.Fatalf("%d submits, the first answered %d: want 2, the first 201", submits.Load(), firstAnswer)
	}
	if !s.Again() || s.Run.RunID != "r1" || s.Run.State != wire.Running || s.Run.Assigned["main"] != "n1" {
		t.Fatalf("the retry got %d %+v, want 200 with r1 RUNNING on n1", s.Status, s.Run)
	}
	if n := env.Count(`SELECT count(*) FROM runs`); n != 1 {
		t.Fatalf("%d runs stored", n)
	}
	env.CheckInvariants()
}

// What the real handlers answer decodes into the client's types and errors: a 400 with every
// path, a 422 as a result with its unmet roles, run_not_live with the run, a dry run's verdict,
// a page of runs and its cursor.
func TestTheClientReadsTheRealAnswers(t *testing.T) {
	t.Parallel()
	env, base := stack(t, nil)
	ctx := context.Background()
	api := dial(t, base, "dev-client")
	admin := dial(t, base, "dev-admin")
	node := dial(t, base, "dev-node-n1")

	hb, err := node.Heartbeat(ctx, "n1", client.HeartbeatRequest{BootID: "b1", Labels: []string{"board=rpi4"}})
	if err != nil || hb.Node.State != "idle" || hb.Lease != nil || hb.NextHeartbeatSeconds <= 0 {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	_, err = api.Submit(ctx, []byte(`{"run_id":"d","needs":["board=rpi4"],"steps":[{"id":"x","after":["y"]}],"colour":1}`))
	var bad *client.Error
	if !errors.As(err, &bad) || bad.Status != 400 || bad.Code != client.CodeInvalidRequest || len(bad.Errors) != 2 {
		t.Fatalf("a malformed run: %v", err)
	}
	v, err := api.DryRun(ctx, client.RunRequest{RunID: "a", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{{ID: "s"}}})
	if err != nil || v.Verdict != wire.Placeable || v.Assigned["main"] != "n1" {
		t.Fatalf("dry run: %+v %v", v, err)
	}
	refused, err := api.Submit(ctx, client.RunRequest{RunID: "g", Needs: []string{"gpu"}, Steps: []client.StepRequest{{ID: "s"}}})
	if err != nil || !refused.Refused() || refused.Run.State != wire.Failed || len(refused.Unmet) != 1 || refused.Unmet[0].Needs[0] != "gpu" {
		t.Fatalf("a run no node could serve: %+v %v", refused, err)
	}
	placed, err := api.Submit(ctx, client.RunRequest{RunID: "a", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{{ID: "s"}}})
	if err != nil || !placed.Placed() {
		t.Fatalf("submit: %+v %v", placed, err)
	}
	hb, err = node.Heartbeat(ctx, "n1", client.HeartbeatRequest{BootID: "b1", Labels: []string{"board=rpi4"}})
	if err != nil || hb.Lease == nil || len(hb.Steps) != 1 || !hb.Steps[0].Runnable {
		t.Fatalf("heartbeat with work: %+v %v", hb, err)
	}
	exit := 0
	for _, status := range []string{wire.ReportStarted, wire.ReportSucceeded} {
		r := client.ReportRequest{NodeID: "n1", BootID: "b1", Epoch: hb.Lease.Epoch, Status: status}
		if status == wire.ReportSucceeded {
			r.ExitCode = &exit
		}
		rep, err := node.Report(ctx, "a", "s", r)
		if err != nil {
			t.Fatalf("report %s: %v", status, err)
		}
		if status == wire.ReportSucceeded && rep.RunState != wire.Succeeded {
			t.Fatalf("report: %+v", rep)
		}
	}
	_, err = api.Cancel(ctx, "a", client.CancelRequest{Reason: "too late"})
	var ended *client.Error
	if !errors.As(err, &ended) || ended.Code != client.CodeRunNotLive || ended.Run == nil || ended.Run.State != wire.Succeeded {
		t.Fatalf("cancelling a finished run: %v", err)
	}
	d, err := api.GetRun(ctx, "a")
	if err != nil || d.Run.State != wire.Succeeded || len(d.History) < 2 || d.Run.StepsDone() != 1 {
		t.Fatalf("get: %+v %v", d, err)
	}
	page, err := api.ListRuns(ctx, client.ListRunsParams{Limit: 1})
	if err != nil || len(page.Runs) != 1 || page.Next == nil {
		t.Fatalf("a page of one: %+v %v", page, err)
	}
	var all []string
	for p, err := range api.RunPages(ctx, client.ListRunsParams{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			all = append(all, r.RunID)
		}
	}
	if len(all) != 2 {
		t.Fatalf("every page: %v, want a and g", all)
	}
	if _, err := api.ListNodes(ctx); !client.HasCode(err, client.CodeForbidden) {
		t.Fatalf("a client listing nodes: %v", err)
	}
	if nodes, err := admin.ListNodes(ctx); err != nil || len(nodes.Nodes) != 1 {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	if leases, err := admin.ListLeases(ctx); err != nil || len(leases.Leases) != 0 {
		t.Fatalf("leases: %+v %v", leases, err)
	}
	if q, err := api.Queue(ctx); err != nil || len(q.Queue) != 0 {
		t.Fatalf("queue: %+v %v", q, err)
	}
	// Priorities: a run that waits, raised by an admin, found by its priority.
	low := 10
	if _, err := api.Submit(ctx, client.RunRequest{RunID: "busy", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{{ID: "s"}}}); err != nil {
		t.Fatal(err)
	}
	queued, err := api.Submit(ctx, client.RunRequest{RunID: "p", Needs: []string{"board=rpi4"}, Priority: &low, Steps: []client.StepRequest{{ID: "s"}}})
	if err != nil || !queued.Queued() || queued.Run.Priority != 10 {
		t.Fatalf("a run at priority 10: %+v %v", queued, err)
	}
	if q, err := api.Queue(ctx); err != nil || len(q.Queue) != 1 || len(q.Queue[0].Priorities) != 1 || q.Queue[0].Priorities[0] != (client.PriorityCount{Priority: 10, Queued: 1}) {
		t.Fatalf("queue by priority: %+v %v", q, err)
	}
	if _, err := api.SetPriority(ctx, "p", 90); !client.HasCode(err, client.CodeForbidden) {
		t.Fatalf("a client changing a priority: %v", err)
	}
	raised, err := admin.SetPriority(ctx, "p", 90)
	if err != nil || raised.Run.Priority != 90 || raised.Run.State != wire.Queued {
		t.Fatalf("priority: %+v %v", raised, err)
	}
	ninety := 90
	if page, err := api.ListRuns(ctx, client.ListRunsParams{Priority: &ninety}); err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != "p" {
		t.Fatalf("runs at priority 90: %+v %v", page, err)
	}
	if _, err := admin.Cancel(ctx, "busy", client.CancelRequest{Force: true}); err != nil {
		t.Fatal(err)
	}
	if h, err := dial(t, base, "").Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("healthz: %+v %v", h, err)
	}
	if doc, err := dial(t, base, "").OpenAPI(ctx); err != nil || len(doc.Body) == 0 {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	if rm, err := admin.RemoveNode(ctx, "n1"); err != nil || rm.NodeID != "n1" {
		t.Fatalf("remove: %+v %v", rm, err)
	}
	env.CheckInvariants()
}

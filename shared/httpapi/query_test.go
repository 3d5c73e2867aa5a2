package httpapi_test

import (
	"fmt"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
)

func TestGetRunShowsPositionAndHistory(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("a", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("c", "board"))

	resp := env.Do(alice, "GET", "/v1/runs/c", nil)
	var got struct {
		Run     store.Run     `json:"run"`
		History []store.Event `json:"history"`
	}
	resp.Decode(t, &got)
	if resp.Status != 200 || got.Run.State != store.Queued || got.Run.QueuePosition == nil || *got.Run.QueuePosition != 1 {
		t.Fatalf("c: %s", resp)
	}
	if len(got.History) != 1 || got.History[0].Kind != "submitted" || got.History[0].To != store.Queued {
		t.Fatalf("c's history: %+v", got.History)
	}
	if resp := env.Do(apitest.Client("bob"), "GET", "/v1/runs/c", nil); resp.Status != 404 {
		t.Fatalf("another client's run: %s", resp)
	}
	if resp := env.Do(apitest.Admin, "GET", "/v1/runs/c", nil); resp.Status != 200 {
		t.Fatalf("admin: %s", resp)
	}
	if resp := env.Do(alice, "GET", "/v1/runs/nope", nil); resp.Status != 404 {
		t.Fatalf("unknown run: %s", resp)
	}
}

// Keyset pagination: every run exactly once, newest first, only the caller's.
func TestListRunsPages(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	for i := range 7 {
		run := oneNodeRun(fmt.Sprintf("r%d", i), "gpu")
		run["wait_for_capacity"] = true
		env.Do(alice, "POST", "/v1/runs", run)
	}
	env.Do(apitest.Client("bob"), "POST", "/v1/runs", oneNodeRun("bobs", "gpu"))
	seen := map[string]bool{}
	after := ""
	for page := 0; ; page++ {
		target := "/v1/runs?state=QUEUED&limit=3"
		if after != "" {
			target += "&after=" + after
		}
		resp := env.Do(alice, "GET", target, nil)
		var body struct {
			Runs []store.Run `json:"runs"`
			Next *string     `json:"next"`
		}
		resp.Decode(t, &body)
		if resp.Status != 200 || len(body.Runs) > 3 {
			t.Fatalf("page %d: %s", page, resp)
		}
		for _, r := range body.Runs {
			if seen[r.RunID] || r.RunID == "bobs" {
				t.Fatalf("page %d: %s again, or not alice's", page, r.RunID)
			}
			seen[r.RunID] = true
		}
		if body.Next == nil {
			break
		}
		after = *body.Next
	}
	if len(seen) != 7 {
		t.Fatalf("saw %d of 7 runs", len(seen))
	}
	for _, bad := range []string{"?state=READY", "?limit=0", "?limit=1000", "?after=garbage"} {
		if resp := env.Do(alice, "GET", "/v1/runs"+bad, nil); resp.Status != 400 {
			t.Errorf("%s: %s", bad, resp)
		}
	}
}

func TestQueueView(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Heartbeat("B", "b1", true, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("a", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board"))
	resp := env.Do(alice, "GET", "/v1/queue", nil)
	var body struct {
		Queue []store.QueueEntry `json:"queue"`
	}
	resp.Decode(t, &body)
	if resp.Status != 200 || len(body.Queue) != 1 {
		t.Fatalf("queue: %s", resp)
	}
	q := body.Queue[0]
	if q.Queued != 1 || q.OldestRunID != "b" || q.CapableNodes != 2 || q.AvailableNodes != 0 || q.PlaceableNow {
		t.Fatalf("entry: %+v", q)
	}
}

package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/apitest"
	"mediator/shared/auth"
	"mediator/shared/store"
	"mediator/shared/wire"
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
	if resp.Status != 200 || got.Run.State != wire.Queued || got.Run.QueuePosition == nil || *got.Run.QueuePosition != 1 {
		t.Fatalf("c: %s", resp)
	}
	if len(got.History) != 1 || got.History[0].Kind != "submitted" || got.History[0].To != wire.Queued {
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

// A listed run carries the queue_position GET gives it, though a list counts the queue once
// per page: for every page, for the owner and the admin, in any state, with gaps in the queue
// left by other owners' runs, a cancelled run and runs of another shape.
func TestListedRunsCarryTheirQueuePosition(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	bob := apitest.Client("bob")
	for i := range 12 {
		who, needs := alice, "board"
		if i%3 == 1 {
			who = bob
		}
		if i%4 == 3 {
			needs = "gpu"
		}
		run := oneNodeRun(fmt.Sprintf("r%02d", i), needs)
		run["wait_for_capacity"] = true
		env.Do(who, "POST", "/v1/runs", run)
	}
	if resp := env.Do(alice, "POST", "/v1/runs/r05/cancel", nil); resp.Status != 200 {
		t.Fatalf("cancel r05: %s", resp)
	}
	listed := 0
	for _, viewer := range []auth.Principal{alice, apitest.Admin} {
		for _, filter := range []string{"", "state=QUEUED&"} {
			for after := ""; ; {
				resp := env.Do(viewer, "GET", "/v1/runs?"+filter+"limit=4"+after, nil)
				var page struct {
					Runs []store.Run `json:"runs"`
					Next *string     `json:"next"`
				}
				resp.Decode(t, &page)
				for _, listedRun := range page.Runs {
					listed++
					var got struct {
						Run store.Run `json:"run"`
					}
					env.Do(apitest.Admin, "GET", "/v1/runs/"+listedRun.RunID, nil).Decode(t, &got)
					if got.Run.State != listedRun.State || position(got.Run) != position(listedRun) {
						t.Errorf("%s listed %s at %s; GET says %s at %s", listedRun.RunID, listedRun.State,
							position(listedRun), got.Run.State, position(got.Run))
					}
				}
				if page.Next == nil {
					break
				}
				after = "&after=" + *page.Next
			}
		}
	}
	if queued := env.Count(`SELECT count(*) FROM runs WHERE state = 'QUEUED'`); queued < 8 || listed < 20 {
		t.Fatalf("the test checked too little: %d queued, %d listed", queued, listed)
	}
}

func position(r store.Run) string {
	if r.QueuePosition == nil {
		return "no position"
	}
	return fmt.Sprint(*r.QueuePosition)
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
	// Another client sees the counts but not alice's run id (GET of it is 404 to them);
	// an admin sees it.
	for who, want := range map[auth.Principal]string{apitest.Client("bob"): "", apitest.Admin: "b"} {
		resp := env.Do(who, "GET", "/v1/queue", nil)
		var seen struct {
			Queue []store.QueueEntry `json:"queue"`
		}
		resp.Decode(t, &seen)
		if len(seen.Queue) != 1 || seen.Queue[0].Queued != 1 || seen.Queue[0].OldestRunID != want {
			t.Errorf("%s sees %s", who.ID, resp)
		}
	}
}

// The query string is read as the client wrote it: escapes decoded, the raw string preferred
// to the event's map, and the map read for an event built by hand without the raw string.
func TestQueryStringIsReadFromTheRawString(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	env.Heartbeat("A", "b1", false, "board")
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("a", "board"))
	env.Do(alice, "POST", "/v1/runs", oneNodeRun("b", "board"))

	// %74rue is "true", escaped: a dry run, which stores nothing.
	resp := env.Do(alice, "POST", "/v1/runs?dry_run=%74rue", oneNodeRun("dry", "board"))
	if resp.Status != 200 || env.Count(`SELECT count(*) FROM runs WHERE run_id = 'dry'`) != 0 {
		t.Fatalf("?dry_run=%%74rue: %s", resp)
	}
	list := func(ev events.APIGatewayV2HTTPRequest) []string {
		t.Helper()
		resp := env.Invoke("query", ev)
		var body struct {
			Runs []store.Run `json:"runs"`
		}
		resp.Decode(t, &body)
		if resp.Status != 200 {
			t.Fatalf("%q %v: %s", ev.RawQueryString, ev.QueryStringParameters, resp)
		}
		var ids []string
		for _, r := range body.Runs {
			ids = append(ids, r.RunID)
		}
		return ids
	}
	ev, _ := env.Event(alice, "GET", "/v1/runs?state=%51UEUED", nil)
	if ids := list(ev); len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("?state=%%51UEUED listed %v, want [b]", ids)
	}
	// The raw string wins over a map that disagrees with it.
	ev.QueryStringParameters = map[string]string{"state": "RUNNING"}
	if ids := list(ev); len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("the map was read over the raw string: %v", ids)
	}
	// A hand-built event with only the map.
	ev.RawQueryString, ev.QueryStringParameters = "", map[string]string{"state": "RUNNING"}
	if ids := list(ev); len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("state=RUNNING from the map listed %v, want [a]", ids)
	}
	ev.QueryStringParameters = map[string]string{"colour": "red"}
	if resp := env.Invoke("query", ev); resp.Status != 400 || !strings.Contains(string(resp.Body), `"path":"colour"`) {
		t.Fatalf("an unknown parameter in the map: %s", resp)
	}

	// Credentials come first: a caller without them learns nothing about the parameters.
	if resp := env.Do(apitest.Nobody, "GET", "/v1/runs?colour=red", nil); resp.Status != 401 {
		t.Fatalf("no principal, unknown parameter: %s", resp)
	}
}

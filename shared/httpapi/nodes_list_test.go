package httpapi_test

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/store"
	"mediator/shared/wire"
)

type nodePage struct {
	Nodes []store.Node `json:"nodes"`
	Next  *string      `json:"next"`
}

// readFleet pages through GET /v1/nodes with query (limit=…, or ""), and answers the node ids
// in the order the pages gave them and the size of each page's answer.
func readFleet(t *testing.T, env *apitest.Env, query string) (ids []string, sizes []int) {
	t.Helper()
	for after := ""; ; {
		target := "/v1/nodes?" + query
		if after != "" {
			target += "&after=" + after
		}
		resp := env.Do(apitest.Admin, "GET", target, nil)
		var page nodePage
		resp.Decode(t, &page)
		if resp.Status != 200 {
			t.Fatalf("%s: %s", target, resp)
		}
		for _, n := range page.Nodes {
			ids = append(ids, n.NodeID)
		}
		sizes = append(sizes, len(resp.Body))
		if page.Next == nil {
			return ids, sizes
		}
		if len(page.Nodes) == 0 {
			t.Fatalf("%s: an empty page with a next cursor", target)
		}
		after = *page.Next
	}
}

// The fleet comes a page at a time, each node once, in node_id order, however the ids sort
// with the "." and ":" a cursor cannot hold as they are.
func TestListNodesPages(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	want := []string{"a", "lab.1:b0", "lab.1:b1", "lab.2", "z-9"}
	for _, id := range slices.Backward(want) {
		env.Heartbeat(id, "b1", false, "board")
	}
	for _, limit := range []string{"limit=1", "limit=2", "limit=5", ""} {
		ids, sizes := readFleet(t, env, limit)
		if !slices.Equal(ids, want) {
			t.Fatalf("%q: %v, want %v", limit, ids, want)
		}
		if pages := map[string]int{"limit=1": 5, "limit=2": 3, "limit=5": 1, "": 1}[limit]; len(sizes) != pages {
			t.Fatalf("%q: %d pages, want %d", limit, len(sizes), pages)
		}
	}
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, q := range []string{"limit=0", fmt.Sprintf("limit=%d", wire.MaxNodePageSize+1), "limit=-1", "limit=abc", "limit=",
		"after=not*a*cursor", "after=" + cursor("bad id"), "after=" + cursor(strings.Repeat("x", 129)), "state=idle"} {
		resp := env.Do(apitest.Admin, "GET", "/v1/nodes?"+q, nil)
		var body problemBody
		resp.Decode(t, &body)
		param, _, _ := strings.Cut(q, "=")
		if resp.Status != 400 || len(body.Errors) != 1 || body.Errors[0]["path"] != param {
			t.Errorf("?%s: %s", q, resp)
		}
	}
	if resp := env.Do(alice, "GET", "/v1/nodes", nil); resp.Status != 403 {
		t.Fatalf("a client: %s", resp)
	}
}

// A page ends before the node that would take its answer past wire.NodePageBytes, whatever
// the limit: a fleet whose nodes carry the most labels of the longest kind still comes whole,
// and no answer comes near Lambda's 6 MB.
func TestAPageOfTheFleetStaysUnderTheAnswersLimit(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	labels := make([]string, wire.MaxLabels)
	for i := range labels {
		key := fmt.Sprintf("k%02d", i) + strings.Repeat("k", 60)
		labels[i] = key + "=" + strings.Repeat("v", 127)
	}
	slices.Sort(labels)
	var want []string
	for i := range 400 { // 400 such nodes are some 5 MB of JSON
		id := fmt.Sprintf("n%03d", i)
		env.Heartbeat(id, "b1", false, labels...)
		want = append(want, id)
	}
	ids, sizes := readFleet(t, env, "")
	if !slices.Equal(ids, want) {
		t.Fatalf("%d nodes read of %d, or out of order", len(ids), len(want))
	}
	if len(sizes) < 2 {
		t.Fatalf("one page of %d bytes: the page was not cut", sizes[0])
	}
	for i, size := range sizes {
		if size > wire.NodePageBytes+1024 {
			t.Fatalf("page %d is %d bytes, over %d", i, size, wire.NodePageBytes)
		}
	}
}

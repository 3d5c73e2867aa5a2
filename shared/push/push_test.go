package push_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"mediator/shared/push"
)

// A sweep's thousands of hints go out MaxInFlight at a time, never more, and what the budget
// left unsent is one line of the log, not one per node. The data plane here answers no publish
// before the Hinter gives up on it (it holds each request until the client cancels), so every
// hint is unsent and the most in flight is what the Hinter allows.
func TestManyHintsGoOutAFewAtATime(t *testing.T) {
	t.Parallel()
	var (
		mu               sync.Mutex
		inFlight, most   int
		received, topics = 0, map[string]bool{}
	)
	dataPlane := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/topics/mediator/nodes/") || r.URL.Query().Get("qos") != "1" {
			http.Error(w, "not a publish", http.StatusBadRequest)
			return
		}
		mu.Lock()
		inFlight++
		received++
		most = max(most, inFlight)
		topics[r.URL.Path] = true
		mu.Unlock()
		// With the body read, the server watches the connection, and the client's cancel at
		// the end of its budget ends the request's context.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	t.Cleanup(dataPlane.Close)
	var log bytes.Buffer
	h, err := push.New(dataPlane.URL, "us-east-1", credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]string, 500)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n-%03d", i)
	}
	h.Hint(context.Background(), append(nodes, nodes[:10]...)...) // a node named twice is hinted once
	mu.Lock()
	defer mu.Unlock()
	if most > push.MaxInFlight || most == 0 || received != len(topics) {
		t.Fatalf("%d hints in flight at most (allowed %d), %d received for %d topics", most, push.MaxInFlight, received, len(topics))
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	var line struct {
		Msg    string `json:"msg"`
		Nodes  int    `json:"nodes"`
		NodeID string `json:"node_id"`
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || line.Nodes != len(nodes) || line.NodeID == "" ||
		!strings.HasPrefix(line.Msg, "hints not sent") {
		t.Fatalf("the log of %d unsent hints: %q", len(nodes), log.String())
	}
}

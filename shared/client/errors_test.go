package client

import (
	"context"
	"errors"
	"io"
	"mediator/shared/wire"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// answering is a server that gives every request the same answer.
func answering(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func callError(t *testing.T, base string, call func(*Client) error) *Error {
	t.Helper()
	c, _ := newTestClient(t, base, WithRetry(Retry{Attempts: 2}))
	err := call(c)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error", err)
	}
	return e
}

// A problem is decoded field by field; its Code is the last segment of its type, and
// run_not_live carries the run.
func TestAProblemIsDecoded(t *testing.T) {
	t.Parallel()
	base := answering(t, 409, "application/problem+json", `{"type":"/problems/run_not_live","title":"The run has already finished",
		"status":409,"detail":"","request_id":"req-9",
		"run":{"run_id":"r","state":"SUCCEEDED","reason":null,"attempt":1,"max_attempts":1,"created_at":"2026-11-30T12:00:00Z","steps":[]}}`)
	e := callError(t, base, func(c *Client) error { _, err := c.Cancel(context.Background(), "r", CancelRequest{}); return err })
	if e.Status != 409 || e.Code != CodeRunNotLive || e.Title != "The run has already finished" || e.RequestID != "req-9" ||
		e.Run == nil || e.Run.RunID != "r" || e.Run.State != wire.Succeeded || e.Attempts != 1 {
		t.Fatalf("got %+v", e)
	}
	if !HasCode(e, CodeRunNotLive) || Unavailable(e) {
		t.Fatal("HasCode or Unavailable misread the problem")
	}
}

func TestEveryFieldErrorIsKept(t *testing.T) {
	t.Parallel()
	base := answering(t, 400, "application/problem+json", `{"type":"/problems/invalid_request","title":"The request is not valid",
		"status":400,"detail":"2 problem(s) with the request; see errors","code":"invalid_request",
		"errors":[{"path":"steps[0].after[0]","message":"names no step of this run (\"y\")"},{"path":"colour","message":"unknown field"}]}`)
	e := callError(t, base, func(c *Client) error { _, err := c.Submit(context.Background(), []byte(`{}`)); return err })
	if e.Code != CodeInvalidRequest || len(e.Errors) != 2 || e.Errors[0].Path != "steps[0].after[0]" || e.Errors[1].Path != "colour" {
		t.Fatalf("got %+v", e)
	}
	for _, want := range []string{"400", "invalid_request", "steps[0].after[0]", "colour: unknown field"} {
		if !strings.Contains(e.Error(), want) {
			t.Fatalf("%q does not say %q", e.Error(), want)
		}
	}
}

// Not every error is a problem: API Gateway answers {"message": ...}, a proxy answers HTML.
// The status is kept, and the body still says what happened.
func TestAnErrorThatIsNotAProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status      int
		contentType string
		body        string
		wantDetail  string
		wantTries   int
	}{
		{403, "application/json", `{"message":"User: arn:aws:sts::1:assumed-role/x is not authorized"}`, "User: arn:aws:sts::1:assumed-role/x is not authorized", 1},
		{404, "application/json", `{"message":"Not Found"}`, "Not Found", 1},
		{502, "text/html", "<html><body>Bad Gateway</body></html>", "<html><body>Bad Gateway</body></html>", 2},
		{401, "", "", "", 1},
	} {
		e := callError(t, answering(t, tc.status, tc.contentType, tc.body), func(c *Client) error {
			_, err := c.ListNodes(context.Background())
			return err
		})
		if e.Status != tc.status || e.Code != "" || e.Detail != tc.wantDetail || e.Title != http.StatusText(tc.status) || e.Attempts != tc.wantTries {
			t.Fatalf("%d: got %+v", tc.status, e)
		}
		if !strings.Contains(e.Error(), http.StatusText(tc.status)) {
			t.Fatalf("%q does not name the status", e.Error())
		}
	}
}

// A 2xx that is not what the route answers is an error, not an empty result.
func TestASuccessThatIsNotJSON(t *testing.T) {
	t.Parallel()
	e := callError(t, answering(t, 200, "text/html", "<html>captive portal</html>"), func(c *Client) error {
		_, err := c.Queue(context.Background())
		return err
	})
	if e.Status != 200 || !strings.Contains(e.Detail, "not the JSON") {
		t.Fatalf("got %+v", e)
	}
}

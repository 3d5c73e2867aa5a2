package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"mediator/localdev/gateway"
	"mediator/shared/store"
)

func TestLocalReap(t *testing.T) {
	t.Parallel()
	var got events.EventBridgeEvent
	calls := 0
	reap := func(_ context.Context, ev events.EventBridgeEvent) (store.ReapSummary, error) {
		got = ev
		calls++
		return store.ReapSummary{Expired: 3}, nil
	}
	h := gateway.LocalReap(gateway.DevTokens(), reap)
	for _, tc := range []struct {
		token  string
		status int
		code   string
	}{
		{"dev-admin", 200, ""},
		{"", 401, "unauthenticated"},
		{"not-a-token", 401, "unauthenticated"},
		{"dev-client", 403, "forbidden"},
		{"dev-node-n1", 403, "forbidden"},
	} {
		req := httptest.NewRequest("POST", "/local/reap", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		before := calls
		h(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%q: %d, want %d", tc.token, rec.Code, tc.status)
		}
		if tc.status == 200 {
			if ct := rec.Header().Get("content-type"); ct != "application/json" || !strings.Contains(rec.Body.String(), `"expired":3`) {
				t.Errorf("summary: %s %s", ct, rec.Body.String())
			}
			continue
		}
		checkReapProblem(t, tc.token, rec, tc.code)
		if calls != before {
			t.Errorf("%q: the reaper ran for a caller that may not run it", tc.token)
		}
	}
	if got.DetailType != "Scheduled Event" || got.Source != "aws.events" {
		t.Fatalf("the reaper got %+v", got)
	}
}

// A failed reap is a problem that says nothing of the error: 503 with Retry-After when the
// database could not serve it now, 500 otherwise.
func TestLocalReapFailure(t *testing.T) {
	t.Parallel()
	const secret = `SELECT run_id FROM runs: ERROR: relation "leases_pkey" (SQLSTATE 42P01)`
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"database unavailable", fmt.Errorf("%w: %s", store.ErrUnavailable, secret), 503, "unavailable", "1"},
		{"lost a race", fmt.Errorf("%w: %s", store.ErrRetry, secret), 503, "unavailable", "1"},
		{"out of time", fmt.Errorf("reap: %w", context.DeadlineExceeded), 503, "unavailable", "1"},
		{"a bug", errors.New(secret), 500, "internal", ""},
	} {
		h := gateway.LocalReap(gateway.DevTokens(), func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error) {
			return store.ReapSummary{Expired: 1}, tc.err
		})
		req := httptest.NewRequest("POST", "/local/reap", nil)
		req.Header.Set("Authorization", "Bearer dev-admin")
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.status)
		}
		if ra := rec.Header().Get("Retry-After"); ra != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tc.name, ra, tc.retryAfter)
		}
		checkReapProblem(t, tc.name, rec, tc.code)
		for _, leak := range []string{"select", "sqlstate", "relation", "leases_pkey", "store:", "deadline", "expired"} {
			if strings.Contains(strings.ToLower(rec.Body.String()), leak) {
				t.Errorf("%s: the body carries %q: %s", tc.name, leak, rec.Body.String())
			}
		}
	}
}

// checkReapProblem: an RFC 9457 body, as every route of the API answers its errors.
func checkReapProblem(t *testing.T, name string, rec *httptest.ResponseRecorder, code string) {
	t.Helper()
	if ct := rec.Header().Get("content-type"); ct != "application/problem+json" {
		t.Errorf("%s: content-type %q", name, ct)
	}
	var p struct {
		Type      string `json:"type"`
		Title     string `json:"title"`
		Status    int    `json:"status"`
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("%s: not JSON (%v): %s", name, err, rec.Body.String())
	}
	if p.Code != code || p.Type != "/problems/"+code || p.Title == "" || p.Status != rec.Code || !strings.HasPrefix(p.RequestID, "local-") {
		t.Errorf("%s: not a whole %s problem: %s", name, code, rec.Body.String())
	}
	if strings.Contains(rec.Body.String(), `"message"`) {
		t.Errorf("%s: the old {\"message\"} body: %s", name, rec.Body.String())
	}
}

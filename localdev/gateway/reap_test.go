package gateway_test

import (
	"context"
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
	reap := func(_ context.Context, ev events.EventBridgeEvent) (store.ReapSummary, error) {
		got = ev
		return store.ReapSummary{Expired: 3}, nil
	}
	h := gateway.LocalReap(gateway.DevTokens(), reap)
	for token, want := range map[string]int{"dev-admin": 200, "dev-client": 403, "": 403} {
		req := httptest.NewRequest("POST", "/local/reap", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != want {
			t.Errorf("%q: %d, want %d", token, rec.Code, want)
		}
		if want == 200 && !strings.Contains(rec.Body.String(), `"expired":3`) {
			t.Errorf("summary: %s", rec.Body.String())
		}
	}
	if got.DetailType != "Scheduled Event" || got.Source != "aws.events" {
		t.Fatalf("the reaper got %+v", got)
	}
}

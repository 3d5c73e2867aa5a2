package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/reaper"
	"mediator/shared/store"
)

// ReapFunc is the reap function's handler.
type ReapFunc = func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error)

// LocalReap is POST /local/reap: run the reaper now, with a scheduled event as EventBridge
// would send it, and answer its summary. Admins only. It exists only in the local gateway:
// API Gateway has no such route.
func LocalReap(tokens *Tokens, reap ReapFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok := tokens.Authenticate(r.Header.Get("Authorization"))
		if !ok || !who.IsAdmin() {
			writeJSON(w, http.StatusForbidden, map[string]string{"message": "an admin token is required"})
			return
		}
		sum, err := reap(r.Context(), reaper.ScheduledEvent("local-"+time.Now().UTC().Format(time.RFC3339Nano)))
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "the reap failed; see the log"})
			return
		}
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(sum)
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"mediator/shared/httpapi"
	"mediator/shared/problem"
	"mediator/shared/store"
	"mediator/shared/upkeep"
)

// ReapFunc is the reap function's handler.
type ReapFunc = func(context.Context, events.EventBridgeEvent) (store.ReapSummary, error)

// LocalReap is POST /local/reap: run the reaper now, with a scheduled event as EventBridge
// would send it, and answer its summary. Admins only. It exists only in the local gateway:
// API Gateway has no such route. Its errors are problems, like every route's.
func LocalReap(tokens *Tokens, reap ReapFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := requestID()
		who, ok := tokens.Authenticate(r.Header.Get("Authorization"))
		if !ok {
			writeProblem(w, id, problem.New(problem.Unauthenticated, "present an admin token"))
			return
		}
		if !who.IsAdmin() {
			writeProblem(w, id, problem.New(problem.Forbidden, "only an admin may run the reaper"))
			return
		}
		sum, err := reap(r.Context(), upkeep.ScheduledEvent("local-"+time.Now().UTC().Format(time.RFC3339Nano)))
		if err != nil {
			// The reaper logged the error; its text may name SQL, so the body does not carry it.
			p, _ := httpapi.ProblemFor(err)
			writeProblem(w, id, p)
			return
		}
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(sum)
	}
}

// writeProblem answers an RFC 9457 problem, as the handlers do.
func writeProblem(w http.ResponseWriter, requestID string, p *problem.Problem) {
	p.RequestID = requestID
	w.Header().Set("content-type", "application/problem+json")
	w.Header().Set("cache-control", "no-store")
	if after := p.RetryAfter(); after != "" {
		w.Header().Set("retry-after", after)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

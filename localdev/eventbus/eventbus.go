// Package eventbus is a local stand-in for Amazon EventBridge's PutEvents, speaking its wire
// protocol (AWS JSON 1.1, X-Amz-Target: AWSEvents.PutEvents), so the real SDK client can be
// pointed at it: tests through the client's endpoint option, `make dev` through
// AWS_ENDPOINT_URL_EVENTBRIDGE. It records what it accepted, and can refuse calls or entries
// the way EventBridge does.
package eventbus

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Entry is one accepted event.
type Entry struct {
	EventID      string
	Source       string `json:"Source"`
	DetailType   string `json:"DetailType"`
	Detail       string `json:"Detail"`
	EventBusName string `json:"EventBusName"`
}

// Bus is the stand-in. The zero value accepts everything.
type Bus struct {
	mu       sync.Mutex
	accepted []Entry
	calls    int
	refused  int
	// Down makes every call fail as an internal error would (HTTP 500).
	down bool
	// RefuseEntry, when set, refuses the entries it says so of (FailedEntryCount).
	refuse func(e Entry) bool
}

// SetDown makes every call fail (true) or succeed again (false).
func (b *Bus) SetDown(down bool) { b.mu.Lock(); b.down = down; b.mu.Unlock() }

// Refuse sets which entries are refused one by one (nil: none).
func (b *Bus) Refuse(fn func(Entry) bool) { b.mu.Lock(); b.refuse = fn; b.mu.Unlock() }

// Accepted are the entries accepted so far, in the order they arrived.
func (b *Bus) Accepted() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Entry{}, b.accepted...)
}

// Counts are the calls it answered and the entries it refused.
func (b *Bus) Counts() (calls, refused int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.refused
}

type putEventsInput struct {
	Entries []Entry `json:"Entries"`
}

type resultEntry struct {
	EventID      string `json:"EventId,omitempty"`
	ErrorCode    string `json:"ErrorCode,omitempty"`
	ErrorMessage string `json:"ErrorMessage,omitempty"`
}

func (b *Bus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
		fail(w, http.StatusBadRequest, "UnknownOperationException", "only AWSEvents.PutEvents is served here")
		return
	}
	var in putEventsInput
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &in); err != nil || len(in.Entries) == 0 || len(in.Entries) > 10 {
		fail(w, http.StatusBadRequest, "ValidationException", "1 to 10 entries")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.down {
		fail(w, http.StatusInternalServerError, "InternalException", "the stand-in is down")
		return
	}
	out := struct {
		FailedEntryCount int           `json:"FailedEntryCount"`
		Entries          []resultEntry `json:"Entries"`
	}{Entries: make([]resultEntry, len(in.Entries))}
	for i, e := range in.Entries {
		if b.refuse != nil && b.refuse(e) {
			out.FailedEntryCount++
			b.refused++
			out.Entries[i] = resultEntry{ErrorCode: "ThrottlingException", ErrorMessage: "refused by the stand-in"}
			continue
		}
		e.EventID = fmt.Sprintf("stand-in-%d", len(b.accepted)+1)
		b.accepted = append(b.accepted, e)
		out.Entries[i] = resultEntry{EventID: e.EventID}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}

func fail(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

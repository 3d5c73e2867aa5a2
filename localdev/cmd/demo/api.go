package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// clientToken is the development client every run of the demo belongs to.
const clientToken = "dev-client"

// api is the demo's client side of the HTTP API.
type api struct {
	base   string
	client *http.Client
}

// run is the part of the API's Run the demo looks at.
type run struct {
	RunID         string            `json:"run_id"`
	State         string            `json:"state"`
	Reason        *string           `json:"reason"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts"`
	Assigned      map[string]string `json:"assigned"`
	QueuePosition *int              `json:"queue_position"`
	Steps         []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"steps"`
}

// event is one line of a run's history.
type event struct {
	Attempt int     `json:"attempt"`
	Kind    string  `json:"kind"`
	From    *string `json:"from"`
	To      string  `json:"to"`
	Reason  *string `json:"reason"`
	NodeID  *string `json:"node_id"`
}

// runReply is every run-carrying answer: submit (with unmet on a 422) and get (with history).
type runReply struct {
	status  int
	Run     run     `json:"run"`
	History []event `json:"history"`
	Unmet   []struct {
		Role  string   `json:"role"`
		Needs []string `json:"needs"`
	} `json:"unmet"`
}

// submit posts a run.
func (a *api) submit(ctx context.Context, body map[string]any) (runReply, error) {
	return a.runCall(ctx, http.MethodPost, "/v1/runs", body)
}

// get reads a run with its history.
func (a *api) get(ctx context.Context, runID string) (runReply, error) {
	return a.runCall(ctx, http.MethodGet, "/v1/runs/"+runID, nil)
}

// runCall sends a request as the client and decodes a run-carrying answer of any status.
func (a *api) runCall(ctx context.Context, method, path string, body any) (runReply, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return runReply{}, err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, reader)
	if err != nil {
		return runReply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+clientToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return runReply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return runReply{}, err
	}
	out := runReply{status: resp.StatusCode}
	if err := json.Unmarshal(data, &out); err != nil || out.Run.RunID == "" {
		// A problem body, or not JSON at all: the status and the body say what went wrong.
		return out, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return out, nil
}

// await polls a run every pollEvery until ok holds, or fails after awaitTimeout with the run
// as it last stood. Polling is what a demo can afford; clients of a real fleet would too.
func (a *api) await(ctx context.Context, runID, want string, ok func(run) bool) (runReply, error) {
	const pollEvery, awaitTimeout = 100 * time.Millisecond, 30 * time.Second
	wait, cancel := context.WithTimeout(ctx, awaitTimeout)
	defer cancel()
	var last runReply
	for {
		r, err := a.get(wait, runID)
		if err == nil && ok(r.Run) {
			return r, nil
		}
		if err == nil {
			last = r
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return last, ctx.Err() // the whole demo is ending, not this wait
			}
			return last, fmt.Errorf("run %s: expected %s within %s, got %s", runID, want, awaitTimeout, describe(last.Run))
		case <-time.After(pollEvery):
		}
	}
}

// describe is a run's state in one phrase: "RUNNING on rpi-A", "QUEUED (queue position 0)",
// "FAILED no_capable_node".
func describe(r run) string {
	if r.RunID == "" {
		return "no answer"
	}
	s := r.State
	if r.Reason != nil {
		s += " " + *r.Reason
	}
	if on := nodes(r); on != "" && r.State == "RUNNING" {
		s += " on " + on
	}
	if r.QueuePosition != nil {
		s += fmt.Sprintf(" (queue position %d)", *r.QueuePosition)
	}
	return s
}

// nodes lists the nodes a run holds, by role name order for one stable phrase.
func nodes(r run) string {
	var on []string
	for _, role := range slices.Sorted(maps.Keys(r.Assigned)) {
		on = append(on, r.Assigned[role])
	}
	return strings.Join(on, ", ")
}

// stepState is the state of one step of a run ("" when it has no such step).
func stepState(r run, id string) string {
	for _, s := range r.Steps {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

// line is one history event as the demo prints it.
func (e event) line() string {
	s := e.Kind + " "
	if e.From != nil {
		s += *e.From + " "
	}
	s += "-> " + e.To
	if e.Reason != nil {
		s += " " + *e.Reason
	}
	if e.NodeID != nil {
		s += " (" + *e.NodeID + ")"
	}
	return fmt.Sprintf("attempt %d: %s", e.Attempt, s)
}

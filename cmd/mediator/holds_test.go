package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"mediator/shared/client"
)

// A hold's length is a Go duration or whole days in front of one, as whole seconds, a part of
// a second rounded up; nothing that is not a positive duration is one.
func TestHoldSeconds(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"90m": 5400, "8h": 28800, "1d": 86400, "2d": 172800, "1d12h": 129600, "1.5h": 5400, "1s": 1, "500ms": 1, "1m0.2s": 61,
	} {
		if got, err := holdSeconds("--for", in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "0s", "-1h", "0d", "1", "d", "xd", "-1d", "1d-2h", "soon", "1d1d", "99999999999h"} {
		if got, err := holdSeconds("--for", bad); err == nil {
			t.Errorf("%q: %d, want an error", bad, got)
		} else if !strings.Contains(err.Error(), "--for") {
			t.Errorf("%q: %v does not name the flag", bad, err)
		}
	}
}

// The flags make the hold's submission: --needs and --node the one role main, --role roles of
// their own, --for its seconds; what says two things or nothing is refused.
func TestHoldRequestFromTheFlags(t *testing.T) {
	t.Parallel()
	req, err := holdFlags{needs: []string{"board=rpi4", "usb"}, node: "rpi-7", length: "2h", runID: "h1"}.request(false)
	if err != nil {
		t.Fatal(err)
	}
	if req.RunID != "h1" || !reflect.DeepEqual(req.Needs, []string{"board=rpi4", "usb", "node_id=rpi-7"}) ||
		req.Roles != nil || *req.HoldSeconds != 7200 || req.Steps != nil || req.Priority != nil {
		t.Errorf("--needs --node: %+v", req)
	}
	req, err = holdFlags{roles: []string{"dut=board=rpi4, usb", "host=node_id=bench-1", "spare="}, length: "1d", priority: 70}.request(true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]client.RoleRequest{"dut": {Needs: []string{"board=rpi4", "usb"}}, "host": {Needs: []string{"node_id=bench-1"}}, "spare": {Needs: []string{}}}
	if !reflect.DeepEqual(req.Roles, want) || req.Needs != nil || *req.HoldSeconds != 86400 || *req.Priority != 70 {
		t.Errorf("--role: %+v", req)
	}
	for why, f := range map[string]holdFlags{
		"--for is needed":       {needs: []string{"a"}},
		"positive duration":     {needs: []string{"a"}, length: "0s"},
		"say which nodes":       {length: "1h"},
		"one or the other":      {node: "n", roles: []string{"a=b"}, length: "1h"},
		"given twice":           {roles: []string{"a=b", "a=c"}, length: "1h"},
		"must be NAME=LABEL":    {roles: []string{"board"}, length: "1h"},
		"--priority must be":    {needs: []string{"a"}, length: "1h", priority: 101},
		"must be NAME=LABEL,LA": {roles: []string{"=b"}, length: "1h"},
	} {
		if _, err := f.request(true); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%+v: %v, want %q", f, err, why)
		}
	}
}

// A duration of nothing, of zero or less, is a usage error: exit 3, with the reason, before
// anything is sent (the API's address here answers nothing).
func TestHoldDurationsThatAreNotOneExit3(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"hold", "--needs", "kind=x", "--for", "0s"},
		{"hold", "--needs", "kind=x", "--for", "-1h"},
		{"hold", "--needs", "kind=x"},
		{"extend", "h1", "0"},
		{"extend", "h1", "-30m"},
		{"extend", "h1"},
		{"release"},
	} {
		var out, errs bytes.Buffer
		env := environment{stdout: &out, stderr: &errs, stdin: strings.NewReader(""), now: time.Now,
			getenv: func(k string) string {
				if k == "MEDIATOR_URL" {
					return "http://127.0.0.1:1"
				}
				return ""
			}}
		if code := run(context.Background(), args, env); code != exitUsage {
			t.Errorf("%v: exit %d, want 3\n%s%s", args, code, out.String(), errs.String())
		}
		if !strings.Contains(errs.String(), "mediator: ") {
			t.Errorf("%v: no reason given: %q", args, errs.String())
		}
	}
}

func holdApp(now time.Time) (*app, *bytes.Buffer) {
	var out bytes.Buffer
	return &app{environment: environment{stdout: &out, getenv: func(string) string { return "" }, now: func() time.Time { return now }}}, &out
}

// A hold says until when it holds which nodes, or where it waits and for how long; its id,
// nodes and reason shown visible.
func TestAHoldSaysUntilWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ends := now.Add(time.Hour - 30*time.Millisecond) // read just after it was placed: still 1h
	a, out := holdApp(now)
	a.printHoldSubmitted(&client.Submitted{Reply: client.Reply{Status: 201}, Run: client.Run{RunID: "h\x1b[2J", Kind: client.KindHold,
		State: "RUNNING", HoldSeconds: ptr(3600), HoldEndsAt: &ends, Assigned: map[string]string{"main": "rpi-1", "peer": "rpi\n2"}}})
	want := "hold h\\x1b[2J: RUNNING until 2026-12-01 13:00:00 UTC (in 1h) (201)\n  main → rpi-1\n  peer → rpi\\n2\n"
	if out.String() != want {
		t.Errorf("placed:\n%q\nwant\n%q", out.String(), want)
	}

	out.Reset()
	a.printHoldSubmitted(&client.Submitted{Reply: client.Reply{Status: 202}, Run: client.Run{RunID: "h2", Kind: client.KindHold,
		State: "QUEUED", QueuePosition: ptr(2), HoldSeconds: ptr(5400)}})
	if want := "hold h2: QUEUED at queue position 2, for 1h30m once placed (202)\n"; out.String() != want {
		t.Errorf("queued: %q, want %q", out.String(), want)
	}

	out.Reset()
	a.printHoldSubmitted(&client.Submitted{Reply: client.Reply{Status: 422}, Run: client.Run{RunID: "h3", Kind: client.KindHold,
		State: "FAILED", Reason: ptr("no_capable_node")}, Unmet: []client.Unmet{{Role: "main", Needs: []string{"nothing=here"}}}})
	if want := "hold h3: FAILED no_capable_node, refused (422): no node of the fleet could ever serve it\n  role main needs nothing=here\n"; out.String() != want {
		t.Errorf("refused: %q, want %q", out.String(), want)
	}

	out.Reset()
	a.printHold(client.Run{RunID: "h4", Kind: client.KindHold, State: "SUCCEEDED", Reason: ptr("hold_released"), HoldEndsAt: &ends,
		Assigned: map[string]string{"main": "rpi-1"}})
	if want := "hold h4: SUCCEEDED hold_released\n"; out.String() != want {
		t.Errorf("released: %q, want %q", out.String(), want)
	}
	out.Reset()
	a.printHold(client.Run{RunID: "h5", Kind: client.KindHold, State: "CANCELLED", Reason: ptr("cancelled"), CancelReason: ptr("released\x07")})
	if want := "hold h5: CANCELLED: released\\a\n"; out.String() != want {
		t.Errorf("released while queued: %q, want %q", out.String(), want)
	}
	if got := until(now.Add(-90*time.Second), now); got != "2026-12-01 11:58:30 UTC (1m ago)" {
		t.Errorf("an end gone by: %q", got)
	}
}

// `mediator holds` is a table of the holds that stand, queued ones by their place in the
// queue; "no holds" when none; an OWNER column only when an admin sees owners.
func TestHoldsTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ends := now.Add(90 * time.Minute)
	a, out := holdApp(now)
	a.printHolds([]*client.RunPage{{}, {}})
	if out.String() != "no holds\n" {
		t.Errorf("none: %q", out.String())
	}
	out.Reset()
	a.printHolds([]*client.RunPage{
		{Runs: []client.Run{{RunID: "h1", Kind: client.KindHold, State: "RUNNING", HoldSeconds: ptr(3600), HoldEndsAt: &ends,
			Assigned: map[string]string{"main": "rpi-1"}}}},
		{Runs: []client.Run{{RunID: "h2", Kind: client.KindHold, State: "QUEUED", QueuePosition: ptr(0), HoldSeconds: ptr(28800)}}},
	})
	want := `RUN  STATE    NODES       UNTIL
h1   RUNNING  main=rpi-1  2026-12-01 13:30:00 UTC (in 1h30m)
h2   QUEUED   -           queued · 0 ahead in the queue · for 8h
`
	if out.String() != want {
		t.Errorf("holds:\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	a.printHolds([]*client.RunPage{{Runs: []client.Run{{RunID: "h1", Kind: client.KindHold, State: "RUNNING", HoldEndsAt: &ends, Owner: "client:alice"}}}})
	if lines := strings.Split(out.String(), "\n"); !strings.HasSuffix(lines[0], "OWNER") || !strings.HasSuffix(lines[1], "client:alice") {
		t.Errorf("an admin's:\n%s", out.String())
	}
}

// `mediator run` of a hold says its length and until when, and shows no steps; `mediator
// runs` names its kind.
func TestARunThatIsAHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ends := now.Add(30 * time.Minute)
	a, out := holdApp(now)
	hold := client.Run{RunID: "h1", Kind: client.KindHold, State: "RUNNING", Attempt: 1, MaxAttempts: 1, CreatedAt: now.Add(-time.Hour),
		HoldSeconds: ptr(5400), HoldEndsAt: &ends, Roles: map[string]client.Role{"main": {Needs: []string{"kind=hx"}, NodeID: "rpi-1"}}}
	a.printRun(&client.RunDetail{Run: hold, History: []client.Event{{At: now.Add(-time.Hour), Attempt: 1, Kind: "submitted", To: "RUNNING"}}}, "")
	got := out.String()
	for _, want := range []string{"run h1 (hold): RUNNING", "hold of 1h30m · until 2026-12-01 12:30:00 UTC (in 30m)", "main  kind=hx  rpi-1", "submitted"} {
		if !strings.Contains(got, want) {
			t.Errorf("mediator run does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "STEP") {
		t.Errorf("a hold's steps table:\n%s", got)
	}
	out.Reset()
	queued := client.Run{RunID: "h2", Kind: client.KindHold, State: "QUEUED", QueuePosition: ptr(1), HoldSeconds: ptr(60), CreatedAt: now}
	a.printRun(&client.RunDetail{Run: queued}, "")
	if !strings.Contains(out.String(), "hold of 1m · from when it is placed") {
		t.Errorf("a queued hold:\n%s", out.String())
	}
	out.Reset()
	a.printRuns([]*client.RunPage{{Runs: []client.Run{hold, {RunID: "r", Kind: client.KindRun, State: "QUEUED", CreatedAt: now}}}})
	if lines := strings.Split(out.String(), "\n"); !strings.Contains(lines[0], "KIND") || !strings.Contains(lines[1], "hold") ||
		strings.Contains(lines[1], "0/0") || !strings.Contains(lines[2], "0/0") {
		t.Errorf("runs:\n%s", out.String())
	}
	if got := describe(queued, false); got != "run h2: QUEUED · position 1 · for 1m" {
		t.Errorf("--wait's line of a queued hold: %q", got)
	}
}

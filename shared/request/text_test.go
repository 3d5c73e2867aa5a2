package request_test

import (
	"encoding/json"
	"strings"
	"testing"

	"mediator/shared/problem"
	"mediator/shared/request"
)

// Strings encoding/json would silently turn into U+FFFD — bytes that are not UTF-8, and
// surrogate escapes without their pair — are refused in every body, at the path of the value
// (or of the object, for a key), and in nothing else.
func TestTextThatCannotBeKeptIsRefused(t *testing.T) {
	t.Parallel()
	submit := func(spec string) string {
		return `{"run_id":"r","needs":[],"steps":[{"id":"s","spec":` + spec + `}]}`
	}
	meta := func(m string) string {
		return `{"run_id":"r","needs":[],"steps":[{"id":"s"}],"metadata":` + m + `}`
	}
	const utf8Msg, surrogateMsg = "UTF-8", "surrogate"
	for _, tc := range []struct {
		name, body, path, msg string
	}{
		{"a byte that is never UTF-8", submit("{\"cmd\":\"a\xffb\"}"), "steps[0].spec.cmd", utf8Msg},
		{"a truncated sequence", submit("{\"cmd\":\"\xe2\x82\"}"), "steps[0].spec.cmd", utf8Msg},
		{"an overlong slash", submit("{\"cmd\":\"\xc0\xaf\"}"), "steps[0].spec.cmd", utf8Msg},
		{"a surrogate written as UTF-8", submit("{\"cmd\":\"\xed\xa0\x80\"}"), "steps[0].spec.cmd", utf8Msg},
		{"invalid UTF-8 in metadata", meta("{\"note\":\"caf\xe9\"}"), "metadata.note", utf8Msg},
		{"invalid UTF-8 in a key", meta("{\"n\xffte\":1}"), "metadata", utf8Msg},
		{"invalid UTF-8 in an array", meta("{\"k\":[\"ok\",\"\x80\"]}"), "metadata.k[1]", utf8Msg},
		{"invalid UTF-8 in the run_id", "{\"run_id\":\"r\xff\",\"needs\":[],\"steps\":[{\"id\":\"s\"}]}", "run_id", utf8Msg},
		{"a lone high surrogate", submit(`{"cmd":"\ud800"}`), "steps[0].spec.cmd", surrogateMsg},
		{"a lone low surrogate", meta(`{"note":"\udc00"}`), "metadata.note", surrogateMsg},
		{"in capitals", meta(`{"note":"\uD800"}`), "metadata.note", surrogateMsg},
		{"a high surrogate at the end", meta(`{"note":"x\ud83d"}`), "metadata.note", surrogateMsg},
		{"a high surrogate then a letter", meta(`{"note":"\ud83dx"}`), "metadata.note", surrogateMsg},
		{"a high surrogate then another escape", meta(`{"note":"\ud83d\u0041"}`), "metadata.note", surrogateMsg},
		{"two high surrogates", meta(`{"note":"\ud83d\ud83d"}`), "metadata.note", surrogateMsg},
		{"a pair reversed", meta(`{"note":"\ude00\ud83d"}`), "metadata.note", surrogateMsg},
		{"a pair split by an escape", meta(`{"note":"\ud83d\n\ude00"}`), "metadata.note", surrogateMsg},
		{"after an escaped backslash", meta(`{"note":"\\\ud800"}`), "metadata.note", surrogateMsg},
		{"after a valid pair", meta(`{"note":"\ud83d\ude00\udc00"}`), "metadata.note", surrogateMsg},
		{"a lone surrogate in a key", submit(`{"\ud800":1}`), "steps[0].spec", surrogateMsg},
		{"a lone surrogate deep in a spec", submit(`{"a":{"b":[1,{"c":"\udfff"}]}}`), "steps[0].spec.a.b[1].c", surrogateMsg},
		{"a lone surrogate in a label", `{"run_id":"r","needs":["\ud800"],"steps":[{"id":"s"}]}`, "needs[0]", surrogateMsg},
	} {
		_, errs := request.Submit([]byte(tc.body))
		checkRefusedAt(t, "submit: "+tc.name, errs, tc.path, tc.msg)
	}

	for _, tc := range []struct{ name, body, path, msg string }{
		{"a lone surrogate in a label", `{"boot_id":"b1","labels":["\ud800"]}`, "labels[0]", surrogateMsg},
		{"invalid UTF-8 in a label", "{\"boot_id\":\"b1\",\"labels\":[\"ok\",\"a\xff\"]}", "labels[1]", utf8Msg},
		{"a lone surrogate in the boot_id", `{"boot_id":"\udc00"}`, "boot_id", surrogateMsg},
	} {
		_, errs := request.Heartbeat("n1", []byte(tc.body))
		checkRefusedAt(t, "heartbeat: "+tc.name, errs, tc.path, tc.msg)
	}

	for _, tc := range []struct{ name, body, path, msg string }{
		{"a lone surrogate in the message", `{"node_id":"n1","boot_id":"b1","epoch":1,"status":"failed","message":"\udc00"}`, "message", surrogateMsg},
		{"invalid UTF-8 in the output", "{\"node_id\":\"n1\",\"boot_id\":\"b1\",\"epoch\":1,\"status\":\"failed\",\"output\":\"\xfe\"}", "output", utf8Msg},
	} {
		_, prob := request.Result("r", "s", []byte(tc.body))
		if prob == nil || prob.Code != problem.InvalidRequest {
			t.Errorf("result: %s: want a 400, got %+v", tc.name, prob)
			continue
		}
		checkRefusedAt(t, "result: "+tc.name, prob.Errors, tc.path, tc.msg)
	}

	for _, tc := range []struct{ name, body, path, msg string }{
		{"a lone surrogate in the reason", `{"reason":"stop \ud800"}`, "reason", surrogateMsg},
		{"invalid UTF-8 in the reason", "{\"reason\":\"stop \xc3\"}", "reason", utf8Msg},
		{"invalid UTF-8 in a key", "{\"re\xffson\":\"x\"}", "", utf8Msg},
	} {
		_, _, errs := request.Cancel([]byte(tc.body))
		checkRefusedAt(t, "cancel: "+tc.name, errs, tc.path, tc.msg)
	}
}

func checkRefusedAt(t *testing.T, name string, errs []problem.FieldError, path, msg string) {
	t.Helper()
	for _, e := range errs {
		if e.Path == path && strings.Contains(e.Message, msg) {
			return
		}
	}
	t.Errorf("%s: want a problem at %q saying %q, got %+v", name, path, msg, errs)
}

// Surrogate pairs (how JSON escapes a character past U+FFFF), an escaped backslash before
// "ud800" (which is text, not an escape) and U+FFFD itself are text like any other: accepted,
// and decoded to the characters sent.
func TestTextThatCanBeKeptIsAccepted(t *testing.T) {
	t.Parallel()
	body := `{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"pair":"\ud83d\ude00","caps":"\uD83D\uDE00",` +
		`"raw":"😀","text":"\\ud800","both":"\\\ud83d\ude00\\","fffd":"\ufffd�","bmp":"\u00e9\uffff","k\ud834\udd1e":1}}],` +
		`"metadata":{"note":"a \ud83d\ude00 b"}}`
	run, errs := request.Submit([]byte(body))
	if errs != nil {
		t.Fatalf("refused: %+v", errs)
	}
	var spec map[string]any
	if err := json.Unmarshal(run.Steps[0].Spec, &spec); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"pair": "😀", "caps": "😀", "raw": "😀", "text": `\ud800`, "both": `\😀\`, "fffd": "\ufffd\ufffd",
		"bmp": "é\uffff", "k𝄞": float64(1),
	} {
		if got := spec[key]; got != want {
			t.Errorf("spec[%q] = %q, want %q", key, got, want)
		}
	}
	var meta map[string]string
	if err := json.Unmarshal(run.Metadata, &meta); err != nil || meta["note"] != "a 😀 b" {
		t.Errorf("metadata %s (%v)", run.Metadata, err)
	}

	p, prob := request.Result("r", "s", []byte(`{"node_id":"n1","boot_id":"b1","epoch":1,"status":"failed","message":"\ud83d\udca5","output":"x\\udc00"}`))
	if prob != nil || p.Message == nil || *p.Message != "💥" || p.Output == nil || *p.Output != `x\udc00` {
		t.Errorf("result: %+v %+v", p, prob)
	}
	if reason, _, errs := request.Cancel([]byte(`{"reason":"\ud83d\uded1 stop"}`)); errs != nil || reason != "🛑 stop" {
		t.Errorf("cancel: %q %+v", reason, errs)
	}
}

// Heartbeat: labels left out are no labels; labels null is refused rather than read as none.
func TestHeartbeatLabelsNull(t *testing.T) {
	t.Parallel()
	p, errs := request.Heartbeat("n1", []byte(`{"boot_id":"b1"}`))
	if errs != nil || p.Labels == nil || len(p.Labels) != 0 {
		t.Fatalf("no labels: %+v %v", p, errs)
	}
	_, errs = request.Heartbeat("n1", []byte(`{"boot_id":"b1","labels":null}`))
	checkRefusedAt(t, "labels null", errs, "labels", "array")
	if len(errs) != 1 {
		t.Errorf("labels null: want one problem, got %+v", errs)
	}
}

package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mediator/shared/client"
)

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Spec
		err  string // a part of the error; "" for none
	}{
		{`{"cmd": "make test"}`, Spec{Cmd: "make test"}, ""},
		{`{"argv": ["make", "-C", "src"], "env": {"CC": "clang", "_X1": ""}, "workdir": "/srv", "timeout_seconds": 1.5}`,
			Spec{Argv: []string{"make", "-C", "src"}, Env: map[string]string{"CC": "clang", "_X1": ""}, Workdir: "/srv", Timeout: 1.5}, ""},
		{`{"cmd": "x", "argv": null, "env": null, "workdir": null, "timeout_seconds": null}`, Spec{Cmd: "x"}, ""},
		{`null`, Spec{}, "no spec"},
		{``, Spec{}, "no spec"},
		{`"make"`, Spec{}, "must be an object"},
		{`[]`, Spec{}, "must be an object"},
		{`{}`, Spec{}, "gives no command"},
		{`{"cmd": "a", "argv": ["b"]}`, Spec{}, "not both"},
		{`{"cmd": ""}`, Spec{}, "cmd must be a non-empty string"},
		{`{"cmd": "   "}`, Spec{}, "cmd must be a non-empty string"},
		{`{"cmd": 3}`, Spec{}, "cmd must be a non-empty string"},
		{`{"argv": []}`, Spec{}, "argv must be a non-empty array"},
		{`{"argv": [""]}`, Spec{}, "argv must be a non-empty array"},
		{`{"argv": ["a", 1]}`, Spec{}, "argv must be a non-empty array"},
		{`{"cmd": "x", "duration": "1s", "exit_code": 3}`, Spec{}, `unknown field "duration", "exit_code"`},
		{`{"cmd": "x", "env": {"1X": "a"}}`, Spec{}, `"1X" is not a variable name`},
		{`{"cmd": "x", "env": {"A=B": "a"}}`, Spec{}, `"A=B" is not a variable name`},
		{`{"cmd": "x", "env": {"mediator_run_id": "a"}}`, Spec{}, "MEDIATOR_ variables are the agent's"},
		{`{"cmd": "x", "env": {"A": 1}}`, Spec{}, "env must be an object of string values"},
		{`{"cmd": "x", "env": {"A": "a\u0000b"}}`, Spec{}, "A must not contain NUL"},
		{`{"cmd": "x", "workdir": "rel/dir"}`, Spec{}, "workdir must be an absolute path"},
		{`{"cmd": "x", "timeout_seconds": 0}`, Spec{}, "timeout_seconds must be"},
		{`{"cmd": "x", "timeout_seconds": -1}`, Spec{}, "timeout_seconds must be"},
		{`{"cmd": "x", "timeout_seconds": "10"}`, Spec{}, "timeout_seconds must be"},
		{`{"cmd": "x", "timeout_seconds": 1e12}`, Spec{}, "timeout_seconds must be"},
		{`{"cmd": "x", "infra_exit_codes": [75, 127, 255, 1]}`, Spec{Cmd: "x", InfraExitCodes: []int{75, 127, 255, 1}}, ""},
		{`{"cmd": "x", "infra_exit_codes": []}`, Spec{Cmd: "x"}, ""},
		{`{"cmd": "x", "infra_exit_codes": null}`, Spec{Cmd: "x"}, ""},
		{`{"cmd": "x", "infra_exit_codes": [0]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": [256]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": [-1]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": [3, 3]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": [1.5]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": ["3"]}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": 3}`, Spec{}, "infra_exit_codes must be"},
		{`{"cmd": "x", "infra_exit_codes": [` + strings.Repeat("1,", 32) + `33]}`, Spec{}, "infra_exit_codes must be"},
	} {
		got, err := ParseSpec(json.RawMessage(tc.spec))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.spec, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: want an error saying %q, got %v", tc.spec, tc.err, err)
		case tc.err == "" && (got.Cmd != tc.want.Cmd || !slices.Equal(got.Argv, tc.want.Argv) || len(got.Env) != len(tc.want.Env) ||
			got.Workdir != tc.want.Workdir || got.Timeout != tc.want.Timeout || !slices.Equal(got.InfraExitCodes, tc.want.InfraExitCodes)):
			t.Errorf("%s: got %+v, want %+v", tc.spec, got, tc.want)
		}
	}
	// Every problem at once, so that one failed step says all that is wrong with its spec.
	_, err := ParseSpec(json.RawMessage(`{"cmd": "", "workdir": "x", "colour": 1}`))
	if err == nil || !strings.Contains(err.Error(), "colour") || !strings.Contains(err.Error(), "cmd") || !strings.Contains(err.Error(), "workdir") {
		t.Fatalf("want every problem named, got %v", err)
	}
}

func TestProgramLooksUpArgv0InTheStepsPath(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "flash-board")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "not-exec"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent", "PATH=" + dir}
	path, argv, err := Spec{Argv: []string{"flash-board", "-v"}}.program(env)
	if err != nil || path != tool || !slices.Equal(argv, []string{"flash-board", "-v"}) {
		t.Fatalf("got %q %q %v", path, argv, err)
	}
	if _, _, err := (Spec{Argv: []string{"not-exec"}}).program(env); err == nil || !strings.Contains(err.Error(), "not found in the step's PATH") {
		t.Fatalf("a file that is not executable: %v", err)
	}
	if _, _, err := (Spec{Argv: []string{filepath.Join(dir, "nope")}}).program(env); err == nil {
		t.Fatal("a missing absolute path was taken")
	}
	path, argv, _ = Spec{Cmd: "echo $X"}.program(env)
	if path != "/bin/sh" || !slices.Equal(argv, []string{"sh", "-c", "echo $X"}) {
		t.Fatalf("cmd: %q %q", path, argv)
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"dut": "DUT", "host-2": "HOST_2", "a.b_c": "A_B_C", "ip": "IP", "Build": "BUILD", "x9": "X9", "é": "__",
	} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStepEnv(t *testing.T) {
	st := client.NodeStep{
		RunID: "pair-1", StepID: "check", Role: "host", Attempt: 2,
		Assigned: map[string]string{"dut": "rpi-2", "host": "rpi-1", "usb-hub": "hub-9"},
		Inputs:   map[string]map[string]string{"up": {"ip": "10.0.0.7", "port": "22"}, "flash": {}},
	}
	base := []string{"PATH=/usr/bin", "MEDIATOR_TOKEN=secret", "MEDIATOR_URL=http://x", "HOME=/root"}
	env, err := StepEnv(base, st, "rpi-1", Spec{Env: map[string]string{"PATH": "/opt/bin", "CC": "gcc"}}, "/w/outputs", "/w/inputs.json")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PATH": "/opt/bin", "HOME": "/root", "CC": "gcc",
		"MEDIATOR_RUN_ID": "pair-1", "MEDIATOR_STEP_ID": "check", "MEDIATOR_ROLE": "host", "MEDIATOR_NODE_ID": "rpi-1",
		"MEDIATOR_ATTEMPT": "2", "MEDIATOR_OUTPUTS": "/w/outputs", "MEDIATOR_INPUTS": "/w/inputs.json",
		"MEDIATOR_NODE_DUT": "rpi-2", "MEDIATOR_NODE_HOST": "rpi-1", "MEDIATOR_NODE_USB_HUB": "hub-9",
		"MEDIATOR_INPUT_UP_IP": "10.0.0.7", "MEDIATOR_INPUT_UP_PORT": "22",
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v // the last wins, as for exec
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s is set and should not be (the agent's MEDIATOR_ variables are not the step's)", k)
		}
	}
}

// Names that would meet in one variable fail the step before it starts, naming each meeting:
// outputs of steps whose names differ in case or punctuation, roles differing only in case, a
// role whose variable is the node's own.
func TestStepEnvRefusesNamesThatMeet(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   client.NodeStep
		says []string
	}{
		{"inputs", client.NodeStep{Inputs: map[string]map[string]string{"x": {"y_z": "1"}, "X": {"y_z": "2"}, "x-y": {"z": "3"}}},
			[]string{`MEDIATOR_INPUT_X_Y_Z would be both step "X"'s output "y_z" and step "x"'s output "y_z"`,
				`MEDIATOR_INPUT_X_Y_Z would be both step "X"'s output "y_z" and step "x-y"'s output "z"`}},
		{"roles", client.NodeStep{Assigned: map[string]string{"dut": "a", "DUT": "b"}},
			[]string{`MEDIATOR_NODE_DUT would be both role "DUT"'s node and role "dut"'s node`}},
		{"node id", client.NodeStep{Assigned: map[string]string{"id": "a"}},
			[]string{`MEDIATOR_NODE_ID would be both this node's id and role "id"'s node`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := StepEnv(nil, tc.st, "n-1", Spec{}, "/o", "/i")
			if err == nil {
				t.Fatalf("no error; env %v", env)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

func TestParseOutputs(t *testing.T) {
	got, err := ParseOutputs([]byte("ip=10.0.0.7\n\nurl=http://h/?a=b\r\nip=10.0.0.8\n_K9=\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ip": "10.0.0.8", "url": "http://h/?a=b", "_K9": ""}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if got, err := ParseOutputs(nil); err != nil || len(got) != 0 {
		t.Fatalf("an empty file: %v %v", got, err)
	}
	for in, says := range map[string]string{
		"ip 10.0.0.7\n":                       "line 1: not key=value",
		"a=1\n9lives=x\n":                     `line 2: the key "9lives"`,
		"a-b=1\n":                             `the key "a-b"`,
		"=1\n":                                `the key ""`,
		"k=\xff\xfe\n":                        "not UTF-8",
		"k=a\x00b\n":                          "NUL",
		strings.Repeat("k", 65) + "=1\n":      "does not match",
		"k=" + strings.Repeat("v", 5000):      "more than the 4096",
		"a=" + strings.Repeat("<", 1000) + "": "more than the 4096", // as the API counts it: < is \u003c
	} {
		if _, err := ParseOutputs([]byte(in)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: want an error saying %q, got %v", clip(in, 40), says, err)
		}
	}
}

func TestMergeLabelsAndTheLabelsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "labels")
	if err := os.WriteFile(path, []byte("# this board\nboard=rpi4   # the model\n\n  lab=2\nusb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadLabelsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MergeLabels([]string{"usb", "gpu", " "}, fromFile)
	if err != nil || !slices.Equal(got, []string{"board=rpi4", "gpu", "lab=2", "usb"}) {
		t.Fatalf("got %v %v", got, err)
	}
	if got, err := MergeLabels(nil, nil); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no labels must be [], not nil: %#v %v", got, err)
	}
	if err := os.WriteFile(path, []byte("board=rpi4\nbad label\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLabelsFile(path); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("want the line named: %v", err)
	}
	if _, err := MergeLabels([]string{"=x"}); err == nil {
		t.Fatal("a bad label was taken")
	}
}

package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// Spec is what the agent runs for a step. Mediator keeps a step's spec opaque; this is the
// agent's own reading of it:
//
//	{"cmd": "make test"}                        run by /bin/sh -c
//	{"argv": ["make", "-C", "src", "test"]}     run as given; argv[0] found in the step's PATH
//	"env": {"NAME": "value"}                    added to the step's environment
//	"workdir": "/srv/board"                     an existing directory to run in, instead of a fresh one
//	"timeout_seconds": 600                      killed past it (SIGTERM to its group, SIGKILL after the grace)
//	"infra_exit_codes": [75, 127]               exit codes that say the machine, not the test, failed
//
// Exactly one of cmd and argv; any other field is refused, so a misspelt one is not silently
// ignored.
type Spec struct {
	Cmd     string
	Argv    []string
	Env     map[string]string
	Workdir string
	// Timeout is timeout_seconds, in seconds; 0 is none.
	Timeout float64
	// InfraExitCodes are the exit codes (1 to 255) by which the step's own scripts say the
	// machine is broken rather than the code under test: a step that exits with one is reported
	// an infra failure, which counts against the node's health.
	InfraExitCodes []int
}

// MaxInfraExitCodes bounds infra_exit_codes, as the API does at submit.
const MaxInfraExitCodes = 32

// maxTimeoutSeconds bounds timeout_seconds to something a lease can be held for (a year).
const maxTimeoutSeconds = 366 * 24 * 3600

// envKeyPattern is a variable name a shell can use.
var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseSpec reads a step's spec, or says what is wrong with it.
func ParseSpec(raw json.RawMessage) (Spec, error) {
	var s Spec
	var fields map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return s, errors.New(`the step has no spec: give {"cmd": "..."} or {"argv": [...]}`)
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return s, errors.New(`the spec must be an object: {"cmd": "..."} or {"argv": [...]}`)
	}
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var unknown []string
	for k := range fields {
		switch k {
		case "cmd", "argv", "env", "workdir", "timeout_seconds", "infra_exit_codes":
		default:
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		fail("unknown field %s (the agent reads cmd or argv, env, workdir, timeout_seconds, infra_exit_codes)", strings.Join(unknown, ", "))
	}
	present := func(k string) bool { v, ok := fields[k]; return ok && string(v) != "null" }
	if present("cmd") {
		if json.Unmarshal(fields["cmd"], &s.Cmd) != nil || strings.TrimSpace(s.Cmd) == "" {
			fail("cmd must be a non-empty string")
		} else if strings.ContainsRune(s.Cmd, 0) {
			fail("cmd must not contain NUL")
		}
	}
	if present("argv") {
		if json.Unmarshal(fields["argv"], &s.Argv) != nil || len(s.Argv) == 0 || s.Argv[0] == "" {
			fail("argv must be a non-empty array of strings, argv[0] the program")
		} else if slices.ContainsFunc(s.Argv, func(a string) bool { return strings.ContainsRune(a, 0) }) {
			fail("argv must not contain NUL")
		}
	}
	switch {
	case present("cmd") && present("argv"):
		fail("give cmd or argv, not both")
	case !present("cmd") && !present("argv"):
		fail(`the spec gives no command: {"cmd": "..."} or {"argv": [...]}`)
	}
	if present("env") {
		if json.Unmarshal(fields["env"], &s.Env) != nil {
			fail("env must be an object of string values")
		}
		keys := make([]string, 0, len(s.Env))
		for k := range s.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			switch {
			case !envKeyPattern.MatchString(k):
				fail("env: %q is not a variable name (%s)", k, envKeyPattern)
			case strings.HasPrefix(strings.ToUpper(k), "MEDIATOR_"):
				fail("env: %s: MEDIATOR_ variables are the agent's to set", k)
			case strings.ContainsRune(s.Env[k], 0):
				fail("env: %s must not contain NUL", k)
			}
		}
	}
	if present("workdir") {
		if json.Unmarshal(fields["workdir"], &s.Workdir) != nil || !filepath.IsAbs(s.Workdir) || strings.ContainsRune(s.Workdir, 0) {
			fail("workdir must be an absolute path")
		}
	}
	if present("timeout_seconds") {
		if json.Unmarshal(fields["timeout_seconds"], &s.Timeout) != nil || s.Timeout <= 0 || s.Timeout > maxTimeoutSeconds || math.IsNaN(s.Timeout) {
			fail("timeout_seconds must be a number of seconds above 0 and at most %d", maxTimeoutSeconds)
		}
	}
	if present("infra_exit_codes") {
		var codes []any
		dec := json.NewDecoder(bytes.NewReader(fields["infra_exit_codes"]))
		dec.UseNumber()
		ok := dec.Decode(&codes) == nil && len(codes) <= MaxInfraExitCodes
		seen := map[int64]bool{}
		for _, c := range codes {
			num, isNumber := c.(json.Number) // a string holding a number is not one
			n, err := num.Int64()
			if !isNumber || err != nil || n < 1 || n > wire.MaxExitCode || seen[n] {
				ok = false
				break
			}
			seen[n] = true
			s.InfraExitCodes = append(s.InfraExitCodes, int(n))
		}
		if !ok {
			s.InfraExitCodes = nil
			fail("infra_exit_codes must be a list of at most %d distinct whole numbers from 1 to %d", MaxInfraExitCodes, wire.MaxExitCode)
		}
	}
	if len(problems) > 0 {
		return Spec{}, errors.New(strings.Join(problems, "; "))
	}
	return s, nil
}

// program is what to execute: the path and the arguments (argv[0] first), argv[0] looked up in
// the step's own PATH so that a spec's env can choose it.
func (s Spec) program(env []string) (string, []string, error) {
	if s.Cmd != "" {
		return "/bin/sh", []string{"sh", "-c", s.Cmd}, nil
	}
	path, err := lookPath(s.Argv[0], lookupEnv(env, "PATH"))
	if err != nil {
		return "", nil, err
	}
	return path, s.Argv, nil
}

// lookPath finds a program as a shell would in the PATH given, not the agent's own.
func lookPath(name, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		if executable(name) {
			return name, nil
		}
		return "", fmt.Errorf("argv[0] %q is not an executable file", name)
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, name); executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("argv[0] %q: not found in the step's PATH (%s)", name, pathList)
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// EnvName is a name as part of an environment variable's: upper-cased, every character but
// A-Z and 0-9 an underscore ("dut-2.a" → "DUT_2_A"). Two names may meet in one variable
// ("a-b", "a_b"): StepEnv refuses that.
func EnvName(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// StepEnv is a step's environment: the agent's own without its MEDIATOR_ variables (its
// credentials are not the step's), then the spec's env, then what the agent tells the step.
// Two names that meet in one variable ("a-b" and "a_b", "dut" and "DUT", a role "id" and
// MEDIATOR_NODE_ID) would leave the step one of two values without a word: that is an error
// naming both, and the step does not start. MEDIATOR_INPUTS keeps every input apart.
func StepEnv(base []string, st client.NodeStep, nodeID string, spec Spec, outputsPath, inputsPath string) ([]string, error) {
	var env []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, "MEDIATOR_") {
			env = append(env, kv)
		}
	}
	for _, k := range sortedKeys(spec.Env) {
		env = append(env, k+"="+spec.Env[k])
	}
	told := map[string]string{} // variable → what it tells, for the error
	var collisions []string
	tell := func(name, value, what string) {
		if prev, taken := told[name]; taken {
			collisions = append(collisions, fmt.Sprintf("%s would be both %s and %s", name, prev, what))
			return
		}
		told[name] = what
		env = append(env, name+"="+value)
	}
	tell("MEDIATOR_RUN_ID", st.RunID, "the run's id")
	tell("MEDIATOR_STEP_ID", st.StepID, "the step's id")
	tell("MEDIATOR_ROLE", st.Role, "the step's role")
	tell("MEDIATOR_NODE_ID", nodeID, "this node's id")
	tell("MEDIATOR_ATTEMPT", strconv.Itoa(st.Attempt), "the run's attempt")
	tell("MEDIATOR_OUTPUTS", outputsPath, "the outputs file")
	tell("MEDIATOR_INPUTS", inputsPath, "the inputs file")
	for _, role := range sortedKeys(st.Assigned) {
		tell("MEDIATOR_NODE_"+EnvName(role), st.Assigned[role], fmt.Sprintf("role %q's node", role))
	}
	for _, step := range sortedKeys(st.Inputs) {
		for _, k := range sortedKeys(st.Inputs[step]) {
			tell("MEDIATOR_INPUT_"+EnvName(step)+"_"+EnvName(k), st.Inputs[step][k], fmt.Sprintf("step %q's output %q", step, k))
		}
	}
	if collisions != nil {
		return nil, fmt.Errorf("names meet in the step's environment: %s; rename one of each (MEDIATOR_INPUTS has every input apart)",
			strings.Join(collisions, "; "))
	}
	return env, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// maxOutputsFile bounds what is read of MEDIATOR_OUTPUTS: far past what a report takes
// (wire.MaxOutputsBytes), so that a file over it is said to be too large rather than cut.
const maxOutputsFile = 1 << 20

// ParseOutputs reads a step's MEDIATOR_OUTPUTS file: one key=value per line, the value the
// rest of the line (it may hold "="), blank lines ignored, a key given twice taking its last
// value. Anything else is an error naming the line: the step is failed rather than its outputs
// half sent.
func ParseOutputs(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		n := i + 1
		key, value, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: not key=value", n)
		case !wire.OutputKeyPattern.MatchString(key):
			return nil, fmt.Errorf("line %d: the key %q does not match %s", n, clip(key, 80), wire.OutputKeyPattern)
		case !utf8.ValidString(value):
			return nil, fmt.Errorf("line %d: %s: the value is not UTF-8 text", n, key)
		case strings.ContainsRune(value, 0):
			return nil, fmt.Errorf("line %d: %s: the value contains NUL", n, key)
		}
		out[key] = value
	}
	if b, _ := json.Marshal(out); len(b) > wire.MaxOutputsBytes {
		return nil, fmt.Errorf("%d bytes of JSON, more than the %d an API report takes", len(b), wire.MaxOutputsBytes)
	}
	return out, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

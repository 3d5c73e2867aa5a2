package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"mediator/localdev/apitest"
	"mediator/shared/httpapi"
	"mediator/shared/wire"
)

// Every rule of the wire is written in Go once (shared/wire), and again where Go cannot reach:
// the OpenAPI document clients read, and the schema's CHECKs, the last line of defence. Each
// copy must say what shared/wire says.
func TestWireRulesAreTheSchemasAndTheDocuments(t *testing.T) {
	t.Parallel()
	raw, err := httpapi.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	schema := func(path ...string) any {
		t.Helper()
		var v any = doc["components"].(map[string]any)["schemas"]
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("openapi.yaml: components.schemas.%s: no %q", strings.Join(path, "."), p)
			}
			v = m[p]
		}
		return v
	}
	docs := []struct {
		path []string
		want any
	}{
		{[]string{"ID", "pattern"}, wire.IDPattern.String()},
		{[]string{"Name", "pattern"}, wire.NamePattern.String()},
		{[]string{"Label", "pattern"}, wire.LabelPattern.String()},
		{[]string{"Outputs", "propertyNames", "pattern"}, wire.OutputKeyPattern.String()},
		{[]string{"RunState", "enum"}, wire.RunStates},
		{[]string{"StepState", "enum"}, wire.StepStates},
		{[]string{"Reason", "enum"}, wire.Reasons},
		{[]string{"Priority", "maximum"}, wire.MaxPriority},
		{[]string{"SubmitRequest", "properties", "roles", "maxProperties"}, wire.MaxRoles},
		{[]string{"SubmitRequest", "properties", "needs", "maxItems"}, wire.MaxNeeds},
		{[]string{"RoleRequest", "properties", "needs", "maxItems"}, wire.MaxNeeds},
		{[]string{"SubmitRequest", "properties", "steps", "maxItems"}, wire.MaxSteps},
		{[]string{"StepRequest", "properties", "after", "maxItems"}, wire.MaxSteps},
		{[]string{"StepRequest", "properties", "retries", "maximum"}, wire.MaxRetries},
		{[]string{"SubmitRequest", "properties", "max_attempts", "maximum"}, wire.MaxAttempts},
		{[]string{"SubmitRequest", "properties", "timeout_seconds", "maximum"}, wire.MaxTimeoutSeconds},
		{[]string{"SubmitRequest", "properties", "queue_timeout_seconds", "maximum"}, wire.MaxQueueWaitSeconds},
		{[]string{"HeartbeatRequest", "properties", "labels", "maxItems"}, wire.MaxLabels},
		{[]string{"CancelRequest", "properties", "reason", "maxLength"}, wire.MaxReasonBytes},
		{[]string{"ResultRequest", "properties", "status", "enum"}, wire.ReportStatuses},
		{[]string{"ResultRequest", "properties", "exit_code", "maximum"}, wire.MaxExitCode},
		{[]string{"ResultRequest", "properties", "message", "maxLength"}, wire.MaxMessageBytes},
		{[]string{"ResultRequest", "properties", "output", "maxLength"}, wire.MaxOutputBytes},
		{[]string{"Node", "properties", "state", "enum"}, wire.NodeStates},
		{[]string{"DryRun", "properties", "verdict", "enum"}, []string{wire.Placeable, wire.Busy, wire.Impossible, wire.TooWide}},
		{[]string{"LogSummary", "properties", "sha256", "pattern"}, wire.SHA256Pattern.String()},
		{[]string{"StepLog", "properties", "sha256", "pattern"}, wire.SHA256Pattern.String()},
		{[]string{"LogURLsRequest", "properties", "count", "maximum"}, wire.MaxLogURLs},
		{[]string{"LogURLsRequest", "properties", "from", "maximum"}, wire.MaxLogSeq},
		{[]string{"LogUpload", "properties", "chunks", "maxItems"}, wire.MaxLogURLs},
		{[]string{"LogUpload", "properties", "chunk_max_bytes", "const"}, wire.LogChunkMaxBytes},
		{[]string{"LogChunk", "properties", "bytes", "maximum"}, wire.LogChunkMaxBytes},
		{[]string{"LiveTail", "properties", "bytes", "maximum"}, wire.LogChunkMaxBytes},
	}
	for _, c := range docs {
		got := schema(c.path...)
		if f, ok := got.(float64); ok { // JSON's numbers: 2592000, not 2.592e+06
			got = strconv.FormatFloat(f, 'f', -1, 64)
		}
		if got, want := fmt.Sprint(got), fmt.Sprint(c.want); got != want {
			t.Errorf("openapi.yaml: components.schemas.%s is %s; shared/wire says %s", strings.Join(c.path, "."), got, want)
		}
	}
	limit := doc["components"].(map[string]any)["parameters"].(map[string]any)["Limit"].(map[string]any)["schema"].(map[string]any)["maximum"]
	if limit != float64(wire.MaxPageSize) {
		t.Errorf("openapi.yaml: components.parameters.Limit's maximum is %v; shared/wire says %d", limit, wire.MaxPageSize)
	}
	for _, c := range []struct {
		name string
		want int
	}{{"Spec", wire.MaxSpecBytes}, {"Metadata", wire.MaxMetadataBytes}} {
		if d, _ := schema(c.name, "description").(string); !strings.Contains(d, fmt.Sprintf("%d KiB", c.want>>10)) {
			t.Errorf("openapi.yaml: components.schemas.%s does not say %d KiB: %q", c.name, c.want>>10, d)
		}
	}

	env := apitest.New(t)
	constraint := func(name string) string {
		t.Helper()
		var def string
		if err := env.Store.Pool().QueryRow(context.Background(),
			`SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`, name).Scan(&def); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return def
	}
	pattern := regexp.MustCompile(`~ '(.*)'::text`)
	for name, want := range map[string]*regexp.Regexp{
		"mediator_id_format": wire.IDPattern, "nodes_boot_id_format": wire.IDPattern, "run_roles_role_format": wire.NamePattern,
		"step_logs_sha256_hex": wire.SHA256Pattern,
	} {
		if m := pattern.FindStringSubmatch(constraint(name)); m == nil || m[1] != want.String() {
			t.Errorf("%s is %s; shared/wire says %s", name, constraint(name), want)
		}
	}
	quoted := regexp.MustCompile(`'([^']*)'::text`)
	values := func(def string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for name, want := range map[string][]string{
		"runs_state_valid":              wire.RunStates,
		"steps_state_valid":             wire.StepStates,
		"runs_reason_valid":             wire.Reasons,
		"runs_finished_at_iff_terminal": wire.FinalRunStates,
		"steps_finished_at_iff_terminal": slices.DeleteFunc(slices.Clone(wire.StepStates), func(s string) bool {
			return !wire.Final(s)
		}),
		// A log summary is a terminal report's: never a step's state before it ends.
		"step_logs_state_final": wire.FinalRunStates,
	} {
		if got := values(constraint(name)); !slices.Equal(got, want) {
			t.Errorf("%s holds %v; shared/wire says %v", name, got, want)
		}
	}
	for name, want := range map[string]string{
		// An advert's labels and the implicit node_id=<id> the server adds.
		"nodes_labels_bounded": fmt.Sprintf("cardinality(labels) <= %d", wire.MaxLabels+1),
		"runs_priority_range":  fmt.Sprintf("priority >= 0) AND (priority <= %d", wire.MaxPriority),
	} {
		if def := constraint(name); !strings.Contains(def, want) {
			t.Errorf("%s is %s; shared/wire says %s", name, def, want)
		}
	}
}

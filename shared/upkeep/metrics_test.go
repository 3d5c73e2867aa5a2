package upkeep_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"mediator/localdev/apitest"
	"mediator/shared/upkeep"
	"mediator/shared/wire"
)

// emfFindings are the ways one log line breaks CloudWatch's embedded metric format
// (Specification: Embedded metric format), as CloudWatch Logs would refuse or drop it: the line
// is one JSON object; its _aws member holds a Timestamp in milliseconds (within the 14 days
// past and 2 hours ahead CloudWatch takes) and at least one directive; each directive names a
// namespace, dimension sets of at most 30 keys each naming a string member of the root, and at
// most 100 metrics each naming a number member of the root, with a CloudWatch unit. It returns
// the root's members too, for the caller's own checks.
func emfFindings(line []byte, now time.Time) ([]string, map[string]any) {
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return []string{"not a JSON object: " + err.Error()}, nil
	}
	if dec.More() {
		return []string{"more than one JSON value on the line"}, root
	}
	var out []string
	meta, ok := root["_aws"].(map[string]any)
	if !ok {
		return []string{"no _aws object"}, root
	}
	n, _ := meta["Timestamp"].(json.Number)
	ts, err := n.Int64()
	if err != nil {
		out = append(out, fmt.Sprintf("_aws.Timestamp %v is not whole milliseconds", meta["Timestamp"]))
	} else if at := time.UnixMilli(ts); at.Before(now.Add(-14*24*time.Hour)) || at.After(now.Add(2*time.Hour)) {
		out = append(out, fmt.Sprintf("_aws.Timestamp %v is outside what CloudWatch accepts", at))
	}
	directives, _ := meta["CloudWatchMetrics"].([]any)
	if len(directives) == 0 {
		out = append(out, "_aws.CloudWatchMetrics has no directive")
	}
	units := []string{"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes",
		"Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second", "Kilobytes/Second",
		"Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
		"Gigabits/Second", "Terabits/Second", "Count/Second", "None"}
	for i, d := range directives {
		d, _ := d.(map[string]any)
		if ns, _ := d["Namespace"].(string); ns == "" || strings.HasPrefix(ns, "AWS/") {
			out = append(out, fmt.Sprintf("directive %d: namespace %q", i, d["Namespace"]))
		}
		sets, ok := d["Dimensions"].([]any)
		if !ok {
			out = append(out, fmt.Sprintf("directive %d: Dimensions is not a list of dimension sets", i))
		}
		for _, set := range sets {
			keys, _ := set.([]any)
			if len(keys) > 30 {
				out = append(out, fmt.Sprintf("directive %d: a dimension set of %d keys", i, len(keys)))
			}
			for _, k := range keys {
				name, _ := k.(string)
				if v, ok := root[name].(string); !ok || strings.TrimSpace(v) == "" {
					out = append(out, fmt.Sprintf("directive %d: dimension %v is not a non-empty string member of the line", i, k))
				}
			}
		}
		metrics, _ := d["Metrics"].([]any)
		if len(metrics) == 0 || len(metrics) > 100 {
			out = append(out, fmt.Sprintf("directive %d: %d metrics, want 1 to 100", i, len(metrics)))
		}
		for _, m := range metrics {
			m, _ := m.(map[string]any)
			name, _ := m["Name"].(string)
			if _, ok := root[name].(json.Number); !ok {
				out = append(out, fmt.Sprintf("directive %d: metric %q is not a number member of the line", i, name))
			}
			if unit, ok := m["Unit"].(string); ok && !slices.Contains(units, unit) {
				out = append(out, fmt.Sprintf("directive %d: metric %q has unit %q, none of CloudWatch's", i, name, unit))
			}
		}
	}
	return out, root
}

// The check above bites: each way of breaking the format is found.
func TestEMFFindingsBite(t *testing.T) {
	t.Parallel()
	now := time.Now()
	good := fmt.Sprintf(`{"_aws":{"Timestamp":%d,"CloudWatchMetrics":[{"Namespace":"Mediator","Dimensions":[["FunctionName"]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"FunctionName":"f","M":1}`, now.UnixMilli())
	if f, _ := emfFindings([]byte(good), now); f != nil {
		t.Fatalf("a valid line: %v", f)
	}
	for name, line := range map[string]string{
		"not JSON":                    `reap expired=1`,
		"no Timestamp":                strings.Replace(good, fmt.Sprintf(`"Timestamp":%d,`, now.UnixMilli()), "", 1),
		"no _aws":                     `{"M":1}`,
		"seconds, not ms":             strings.Replace(good, fmt.Sprint(now.UnixMilli()), fmt.Sprint(now.Unix()), 1),
		"a metric not on the line":    strings.Replace(good, `"M":1`, `"N":1`, 1),
		"a metric as a string":        strings.Replace(good, `"M":1`, `"M":"1"`, 1),
		"a dimension not on the line": strings.Replace(good, `"FunctionName":"f"`, `"Other":"f"`, 1),
		"an empty dimension":          strings.Replace(good, `"FunctionName":"f"`, `"FunctionName":""`, 1),
		"an AWS namespace":            strings.Replace(good, `"Mediator"`, `"AWS/Lambda"`, 1),
		"a unit CloudWatch lacks":     strings.Replace(good, `"Count"`, `"Runs"`, 1),
	} {
		if f, _ := emfFindings([]byte(line), now); f == nil {
			t.Errorf("%s: no finding", name)
		}
	}
}

// The reap function's summary line is valid EMF: CloudWatch makes a metric of each count, in
// the Mediator namespace, for the function's name, StrandedRunsRecovered among them, each the
// value the reap answered. Every count of the summary is a metric, so a count added later is
// graphed or this fails.
func TestReapLogLineIsEMF(t *testing.T) {
	t.Parallel()
	env := apitest.New(t)
	r := apitest.NewRun("stranded", "board")
	r.WaitForCapacity = true
	env.Submit(r)
	env.Heartbeat("A", "b1", false, "board") // the store alone: no handler, so no wake
	if env.State("stranded") != wire.Queued {
		t.Fatal("setup: the run was placed")
	}
	var logs bytes.Buffer
	d := env.Deps
	d.Log = slog.New(slog.NewJSONHandler(&logs, nil)).With("function", "reap") // as startup makes it
	sum, err := upkeep.Reap(d)(context.Background(), upkeep.ScheduledEvent("emf"))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Stranded != 1 {
		t.Fatalf("setup: the reap recovered %d stranded runs, want 1", sum.Stranded)
	}
	var line []byte
	for sc := bufio.NewScanner(&logs); sc.Scan(); {
		if strings.Contains(sc.Text(), `"msg":"reap"`) {
			line = slices.Clone(sc.Bytes())
		}
	}
	if line == nil {
		t.Fatalf("no reap line in %s", logs.String())
	}
	findings, root := emfFindings(line, time.Now())
	for _, f := range findings {
		t.Error(f)
	}
	if root == nil {
		t.FailNow()
	}
	directive := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if directive["Namespace"] != upkeep.MetricNamespace || fmt.Sprint(directive["Dimensions"]) != "[["+upkeep.MetricDimension+"]]" {
		t.Errorf("namespace %v, dimensions %v; want %s, [[%s]]", directive["Namespace"], directive["Dimensions"], upkeep.MetricNamespace, upkeep.MetricDimension)
	}
	// Each metric's value is the summary's count it names (json tags of store.ReapSummary).
	metricOf := map[string]string{
		"expired": "LeasesExpired", "cancelled": "CancelsSettled", "timed_out": "RunsTimedOut",
		"queue_timed_out": "QueuedRunsTimedOut", "retired": "NodesRetired", "unservable": "RunsUnservable",
		"promoted": "RunsPromoted", "stranded": upkeep.StrandedRunsMetric, "outage_grace": "OutageGraceLeases",
		"checks_scheduled": "HealthChecksScheduled", "holds_ended": "HoldsEnded", "holds_warned": "HoldsWarned",
		"checks_finished": "HealthChecksFinished", "pruned": "RunsPruned", "published": "EventsPublished",
	}
	var declared []string
	for _, m := range directive["Metrics"].([]any) {
		declared = append(declared, m.(map[string]any)["Name"].(string))
	}
	summary := reflect.ValueOf(sum)
	var counts []string
	for i := range summary.NumField() {
		f := summary.Type().Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Int || tag == "-" {
			continue
		}
		name, ok := metricOf[tag]
		if !ok {
			t.Errorf("the summary's count %s is no metric", tag)
			continue
		}
		counts = append(counts, name)
		if got := fmt.Sprint(root[name]); got != fmt.Sprint(summary.Field(i).Int()) {
			t.Errorf("%s is %s on the line, the reap counted %d %s", name, got, summary.Field(i).Int(), tag)
		}
	}
	if slices.Sort(declared); !slices.Equal(declared, slices.Sorted(slices.Values(counts))) {
		t.Errorf("the line declares metrics %v, the summary's counts are %v", declared, counts)
	}
	if root[upkeep.StrandedRunsMetric] != json.Number("1") {
		t.Errorf("%s is %v, want 1", upkeep.StrandedRunsMetric, root[upkeep.StrandedRunsMetric])
	}
}

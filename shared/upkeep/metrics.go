package upkeep

import (
	"cmp"
	"os"
	"time"

	"mediator/shared/store"
)

// The reap's counts are CloudWatch metrics: the reap function's summary line carries them in
// CloudWatch's embedded metric format (EMF), from which CloudWatch Logs makes metrics as it
// stores the line (Lambda passes a line that is already JSON through unchanged), with no
// PutMetricData call, no permission and no agent. template.yaml alarms on StrandedRunsMetric
// under these names: rename one here and the alarm watches a metric nobody writes.
const (
	MetricNamespace = "Mediator"
	// MetricDimension is the metrics' one dimension, the reap function's name, so two stacks in
	// one account and Region never add up into one series.
	MetricDimension = "FunctionName"
	// StrandedRunsMetric counts the queued runs the reap placed although nothing had been
	// released: each was a lost wakeup, which healthy operation never produces.
	StrandedRunsMetric = "StrandedRunsRecovered"
)

// reapMetrics names each count of a summary as the metric it is, in the summary's order.
func reapMetrics(sum store.ReapSummary) []metric {
	return []metric{
		{"LeasesExpired", sum.Expired},
		{"CancelsSettled", sum.Cancelled},
		{"RunsTimedOut", sum.TimedOut},
		{"QueuedRunsTimedOut", sum.QueueTimedOut},
		{"HoldsEnded", sum.HoldsEnded},
		{"HoldsWarned", sum.HoldsWarned},
		{"NodesRetired", sum.Retired},
		{"RunsUnservable", sum.Unservable},
		{"RunsPromoted", sum.Promoted},
		{StrandedRunsMetric, sum.Stranded},
		{"HealthChecksScheduled", sum.ChecksScheduled},
		{"HealthChecksFinished", sum.ChecksFinished},
		{"OutageGraceLeases", sum.OutageGrace},
		{"RunsPruned", sum.Pruned},
		{"EventsPublished", sum.Published},
	}
}

type metric struct {
	name  string
	value int
}

// emfMetadata is the _aws member of an EMF line: which of the line's members are metrics, of
// which namespace and dimensions, at what time (milliseconds since the epoch).
type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// functionName is the reap function's name as Lambda runs it, the metrics' dimension; outside
// Lambda (make dev) a stand-in, since CloudWatch refuses an empty dimension value.
func functionName() string { return cmp.Or(os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), "mediator-reap") }

// reapAttrs are the summary line's attributes after its message: the event, every count under
// its metric name, the dimension, whether the sweep stopped for its deadline, and the _aws
// member that declares the counts metrics.
func reapAttrs(eventID, function string, at time.Time, sum store.ReapSummary) []any {
	metrics := reapMetrics(sum)
	attrs := []any{"event_id", eventID}
	directive := emfDirective{Namespace: MetricNamespace, Dimensions: [][]string{{MetricDimension}}}
	for _, m := range metrics {
		attrs = append(attrs, m.name, m.value)
		directive.Metrics = append(directive.Metrics, emfMetric{Name: m.name, Unit: "Count"})
	}
	attrs = append(attrs, MetricDimension, function, "unfinished", sum.Unfinished,
		"_aws", emfMetadata{Timestamp: at.UnixMilli(), CloudWatchMetrics: []emfDirective{directive}})
	return attrs
}

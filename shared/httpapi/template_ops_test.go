package httpapi_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"mediator/shared/upkeep"
)

// functionPolicies is the reviewed table of what each function's role holds and why, by the
// code each function runs; checkPolicies holds the template to it, both ways. A function that
// starts calling another AWS API, or stops, changes this table with the code.
var functionPolicies = []struct {
	policy    string   // a managed policy ARN's last part, or a logical id of the template
	functions []string // the functions that hold it, by directory under functions/
	when      func(params map[string]string) bool
	why       string
}{
	{"AWSLambdaBasicExecutionRole", allFunctions, always,
		"every function writes its log group (logs:CreateLogStream, logs:PutLogEvents)"},
	// SAM attaches it to any function with a VpcConfig, and the template's is an !If: a stack
	// without subnets holds it unused, which only roles written out by hand would avoid.
	{"AWSLambdaVPCAccessExecutionRole", allFunctions, always,
		"in SubnetIds, every function creates and deletes its network interfaces"},
	{"DatabaseAccessPolicy", servingFunctions, databaseAccess,
		"every serving function opens the store at start-up (shared/startup) as the application role: it reads that role's secret, or mints rds-db:connect tokens as it"},
	{"MigratorDatabaseAccessPolicy", []string{"migrate"}, databaseAccess,
		"the migrate function logs in as the migrator (its secret, or tokens as it) and reads the application role's secret, whose password it gives the role"},
	{"EventsPolicy", []string{"submit", "nodes", "result", "cancel", "reap"}, func(p map[string]string) bool { return p["EventBusName"] != "" },
		"they publish run events: the writes' handlers after their commit (httpapi's afterCommit: submit, the heartbeat, " +
			"node removal and drains, step reports, cancels and priorities), the reaper what is left (publish.Stale). " +
			"query only reads; migrate turns the outbox on or off in the database, and publishes nothing"},
	{"PushPolicy", []string{"submit", "nodes", "result", "cancel", "reap"}, func(p map[string]string) bool { return p["IotDataEndpoint"] != "" },
		"they push hints after their commit (httpapi's afterCommit and sendHints: a placing submit, a wake's placements, a cancel, " +
			"a hold's release, a drain), and the reaper after its sweep (upkeep.Reap: its wake's placements, the runs and holds it ended): " +
			"iot:Publish on the nodes' hint topics. query and migrate send none"},
	// A presigned URL can do only what its signer may: each function's role is what the URLs it
	// signs, and the requests it sends itself, need of the log bucket (shared/steplogs).
	{"LogWritePolicy", []string{"result"}, always,
		"the result function signs the nodes' upload URLs (log-urls, and the started report's answer): s3:PutObject on the bucket's objects"},
	{"LogReadPolicy", []string{"query"}, always,
		"the query function lists an attempt's chunks (s3:ListBucket) and signs the readers' GET URLs (s3:GetObject): GET .../log"},
	{"LogPrunePolicy", []string{"reap"}, always,
		"the reaper lists a pruned run's prefix (s3:ListBucket) and deletes its objects (s3:DeleteObject, which DeleteObjects needs per key) before the run's rows go"},
}

var (
	allFunctions     = []string{"migrate", "submit", "query", "nodes", "result", "cancel", "reap"}
	servingFunctions = allFunctions[1:]
)

func databaseAccess(p map[string]string) bool {
	return p["DatabaseSecretArn"] != "" || p["DatabaseIamAuth"] == "true"
}

func always(map[string]string) bool { return true }

// policyFindings: each function's role, as SAM's transform makes it and CloudFormation
// resolves it for params, holds exactly functionPolicies' policies, and no inline policy.
func policyFindings(t *testing.T, cfn map[string]any, resolve cfnEval, params map[string]string) []string {
	t.Helper()
	var out []string
	resources := cfnAt(cfn, "Resources").(map[string]any)
	functions := resourcesOf(cfn, "AWS::Lambda::Function")
	if want := len(allFunctions); len(functions) != want {
		return []string{fmt.Sprintf("functions %v, want the table's %d", functions, want)}
	}
	for _, id := range functions {
		name := strings.ToLower(strings.TrimSuffix(id, "Function"))
		var want []string
		for _, p := range functionPolicies {
			if slices.Contains(p.functions, name) && p.when(params) {
				want = append(want, p.policy)
			}
		}
		slices.Sort(want)
		role, _ := cfnAt(resources, id, "Properties", "Role", "Fn::GetAtt").([]any)
		if len(role) != 2 {
			out = append(out, fmt.Sprintf("%s: role %v", id, cfnAt(resources, id, "Properties", "Role")))
			continue
		}
		arns, err := resolve.eval(cfnAt(resources, role[0].(string), "Properties", "ManagedPolicyArns"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range toAnys(arns) {
			switch a := a.(type) {
			case string:
				got = append(got, a[strings.LastIndex(a, "/")+1:])
			default:
				got = append(got, fmt.Sprint(cfnAt(a, "Ref")))
			}
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			out = append(out, fmt.Sprintf("%s holds %v, want %v (functionPolicies)", id, got, want))
		}
		if inline := cfnAt(resources, role[0].(string), "Properties", "Policies"); inline != nil {
			out = append(out, fmt.Sprintf("%s: inline policies %v, which no row of functionPolicies reviews", id, inline))
		}
	}
	if params["EventBusName"] != "" && cfnAt(resources, "EventsPolicy", "Properties", "PolicyDocument", "Statement") == nil {
		out = append(out, "no EventsPolicy")
	}
	if params["IotDataEndpoint"] != "" {
		// Publish only, and only to the nodes' hint topics: never a subscription, never
		// another topic of the account's.
		want := `[map[Action:iot:Publish Effect:Allow Resource:map[Fn::Sub:arn:${AWS::Partition}:iot:${AWS::Region}:${AWS::AccountId}:topic/mediator/nodes/*]]]`
		if got := fmt.Sprint(cfnAt(resources, "PushPolicy", "Properties", "PolicyDocument", "Statement")); got != want {
			out = append(out, "PushPolicy: "+got)
		}
	}
	return out
}

// The check bites: a function given a policy its code does not use, or missing one it does,
// is reported by name.
func TestTemplatePolicyCheckBites(t *testing.T) {
	t.Parallel()
	params := withParams(passwordMode, "EventBusName", "mediator-events")
	tpl := readCFN(t, "../../template.yaml")
	values, err := parameterValues(tpl, params)
	if err != nil {
		t.Fatal(err)
	}
	cfn := transformed(t, params)
	conditions, _ := cfnAt(cfn, "Conditions").(map[string]any)
	resolve := cfnEval{params: values, conditions: conditions}
	if found := policyFindings(t, cfn, resolve, params); found != nil {
		t.Fatalf("the template as it is: %v", found)
	}
	roles := cfnAt(cfn, "Resources").(map[string]any)
	query := cfnAt(roles, "QueryFunctionRole", "Properties").(map[string]any)
	query["ManagedPolicyArns"] = append(toAnys(query["ManagedPolicyArns"]), map[string]any{"Ref": "EventsPolicy"})
	reap := cfnAt(roles, "ReapFunctionRole", "Properties").(map[string]any)
	reap["ManagedPolicyArns"] = slices.DeleteFunc(toAnys(reap["ManagedPolicyArns"]), func(a any) bool {
		return fmt.Sprint(cfnAt(a, "Fn::If")) == "[UseDatabaseAccessPolicy map[Ref:DatabaseAccessPolicy] map[Ref:AWS::NoValue]]"
	})
	found := policyFindings(t, cfn, resolve, params)
	for _, fn := range []string{"QueryFunction", "ReapFunction"} {
		if !slices.ContainsFunc(found, func(f string) bool { return strings.HasPrefix(f, fn+" holds") }) {
			t.Errorf("%s doctored, yet found only %v", fn, found)
		}
	}
}

// Async invokers get the retries they were given on purpose: none for the schedule's reap (the
// next one comes in a minute), two for CloudFormation's migration (its handler fails only when
// its answer to CloudFormation could not be sent, and a retry, migrating idempotently, answers),
// bounded by an event age that leaves a retry room to answer within the ServiceTimeout. Each
// EventInvokeConfig is on the qualifier its invoker calls — the unqualified ARN is $LATEST —
// and exists before the first invocation.
func TestTemplateAsyncInvocationsAreRetriedDeliberately(t *testing.T) {
	t.Parallel()
	cfn := transformed(t, passwordMode)
	resources := cfnAt(cfn, "Resources").(map[string]any)
	invoked := map[string]string{} // function → the qualifier its asynchronous invoker calls
	qualifier := func(target any) (string, string) {
		if getAtt, ok := cfnAt(target, "Fn::GetAtt").([]any); ok && len(getAtt) == 2 && getAtt[1] == "Arn" {
			return getAtt[0].(string), "$LATEST"
		}
		return fmt.Sprint(target), "?"
	}
	for _, id := range resourcesOf(cfn, "AWS::Events::Rule") {
		for _, target := range toAnys(cfnAt(resources, id, "Properties", "Targets")) {
			fn, q := qualifier(cfnAt(target, "Arn"))
			invoked[fn] = q
		}
	}
	customResources := map[string]string{} // custom resource → the function that serves it
	for id, r := range resources {
		if strings.HasPrefix(fmt.Sprint(cfnAt(r, "Type")), "Custom::") {
			fn, q := qualifier(cfnAt(r, "Properties", "ServiceToken"))
			invoked[fn] = q
			customResources[id] = fn
		}
	}
	if want := []string{"MigrateFunction", "ReapFunction"}; !slices.Equal(slices.Sorted(maps.Keys(invoked)), want) {
		t.Fatalf("functions invoked asynchronously: %v, want %v", slices.Sorted(maps.Keys(invoked)), want)
	}
	configured := map[string]string{} // function → its EventInvokeConfig
	for _, id := range resourcesOf(cfn, "AWS::Lambda::EventInvokeConfig") {
		p := cfnAt(resources, id, "Properties")
		fn := fmt.Sprint(cfnAt(p, "FunctionName", "Ref"))
		if q, ok := invoked[fn]; !ok || cfnAt(p, "Qualifier") != q {
			t.Errorf("%s configures %s:%v, which is not what invokes it (%q)", id, fn, cfnAt(p, "Qualifier"), q)
			continue
		}
		want := map[string]string{"ReapFunction": "0", "MigrateFunction": "2"}[fn]
		if fmt.Sprint(cfnAt(p, "MaximumRetryAttempts")) != want {
			t.Errorf("%s: MaximumRetryAttempts %v, want %s", id, cfnAt(p, "MaximumRetryAttempts"), want)
		}
		configured[fn] = id
	}
	for fn := range invoked {
		if configured[fn] == "" {
			t.Errorf("%s is invoked asynchronously with Lambda's default retries", fn)
		}
	}
	// CloudFormation invokes a custom resource's function as soon as the resource is created:
	// only a DependsOn makes its EventInvokeConfig exist first.
	for id, fn := range customResources {
		deps := cfnAt(resources, id, "DependsOn")
		if !slices.Contains(append(toAnys(deps), deps), any(configured[fn])) {
			t.Errorf("%s may invoke %s before %s exists (DependsOn %v)", id, fn, configured[fn], deps)
		}
		// A retry that starts as late as the event age allows must still answer in time.
		age, _ := strconv.Atoi(fmt.Sprint(cfnAt(resources, configured[fn], "Properties", "MaximumEventAgeInSeconds")))
		timeout, _ := strconv.Atoi(fmt.Sprint(cfnAt(resources, fn, "Properties", "Timeout")))
		service, _ := strconv.Atoi(fmt.Sprint(cfnAt(resources, id, "Properties", "ServiceTimeout")))
		if age == 0 || timeout == 0 || age+timeout > service {
			t.Errorf("%s: an event up to %d s old, run for up to %d s, may answer after %s's ServiceTimeout %d s", fn, age, timeout, id, service)
		}
	}
}

// The alarms: every function's Errors and Throttles; the API's 5xx share; the reaper not invoked
// for three minutes, missing data breaching; and the stranded runs the reap's EMF line counts,
// under the names shared/upkeep writes. Each notifies AlarmTopicArn when given, and nothing
// when not.
func TestTemplateAlarms(t *testing.T) {
	t.Parallel()
	const topic = "arn:aws:sns:eu-west-1:123456789012:mediator-alarms"
	tpl := readCFN(t, "../../template.yaml")
	for _, params := range []map[string]string{passwordMode, withParams(passwordMode, "AlarmTopicArn", topic)} {
		cfn := transformed(t, params)
		values, err := parameterValues(tpl, params)
		if err != nil {
			t.Fatal(err)
		}
		conditions, _ := cfnAt(cfn, "Conditions").(map[string]any)
		resolve := cfnEval{params: values, conditions: conditions}
		alarms := map[string]map[string]any{}
		for _, id := range resourcesOf(cfn, "AWS::CloudWatch::Alarm") {
			p, err := resolve.eval(cfnAt(cfn, "Resources", id, "Properties"))
			if err != nil {
				t.Fatal(err)
			}
			alarms[id] = p.(map[string]any)
			for _, actions := range []string{"AlarmActions", "OKActions"} {
				want := "[]"
				if params["AlarmTopicArn"] != "" {
					want = "[" + topic + "]"
				}
				if got := fmt.Sprint(toAnys(alarms[id][actions])); got != want {
					t.Errorf("%s: %s %s, want %s", id, actions, got, want)
				}
			}
		}
		// on is the alarms on one metric of one resource, by its dimension's Ref.
		on := func(namespace, metric, dimension, ref string) []map[string]any {
			var out []map[string]any
			for _, a := range alarms {
				dims := toAnys(a["Dimensions"])
				if a["Namespace"] == namespace && a["MetricName"] == metric && len(dims) == 1 &&
					cfnAt(dims[0], "Name") == dimension && cfnAt(dims[0], "Value", "Ref") == ref {
					out = append(out, a)
				}
			}
			return out
		}
		for _, fn := range resourcesOf(cfn, "AWS::Lambda::Function") {
			for _, metric := range []string{"Errors", "Throttles"} {
				found := on("AWS/Lambda", metric, "FunctionName", fn)
				if len(found) != 1 {
					t.Errorf("%s: %d alarms on its %s, want one", fn, len(found), metric)
					continue
				}
				if a := found[0]; a["Statistic"] != "Sum" || fmt.Sprint(a["Threshold"]) != "1" ||
					a["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || a["TreatMissingData"] != "notBreaching" {
					t.Errorf("%s: the %s alarm %v, want any one in its period, no data no alarm", fn, metric, a)
				}
			}
		}
		reaper := on("AWS/Lambda", "Invocations", "FunctionName", "ReapFunction")
		if len(reaper) != 1 {
			t.Fatalf("%d alarms on the reaper's invocations, want one", len(reaper))
		}
		if a := reaper[0]; a["Statistic"] != "Sum" || fmt.Sprint(a["Period"], "x", a["EvaluationPeriods"], "/", a["DatapointsToAlarm"]) != "60x3/3" ||
			fmt.Sprint(a["Threshold"]) != "1" || a["ComparisonOperator"] != "LessThanThreshold" || a["TreatMissingData"] != "breaching" {
			t.Errorf("the reaper alarm %v: want fewer than 1 invocation in each of 3 minutes, no data breaching", a)
		}
		stranded := on(upkeep.MetricNamespace, upkeep.StrandedRunsMetric, upkeep.MetricDimension, "ReapFunction")
		if len(stranded) != 1 {
			t.Fatalf("%d alarms on %s/%s by %s, want one: the names shared/upkeep writes", len(stranded), upkeep.MetricNamespace, upkeep.StrandedRunsMetric, upkeep.MetricDimension)
		}
		if a := stranded[0]; a["Statistic"] != "Sum" || fmt.Sprint(a["Threshold"]) != "1" || a["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" {
			t.Errorf("the stranded-runs alarm %v: want any one", a)
		}
		// The 5xx share: one expression over the API's 5xx and Count, the one series returned.
		var rate map[string]any
		for _, a := range alarms {
			if a["Metrics"] != nil {
				rate = a
			}
		}
		if rate == nil {
			t.Fatal("no alarm on the API's 5xx share")
		}
		series := map[string]string{}
		var returned []string
		for _, m := range toAnys(rate["Metrics"]) {
			id := fmt.Sprint(cfnAt(m, "Id"))
			if metric := cfnAt(m, "MetricStat", "Metric"); metric != nil {
				dims := toAnys(cfnAt(metric, "Dimensions"))
				if cfnAt(metric, "Namespace") != "AWS/ApiGateway" || len(dims) != 1 || cfnAt(dims[0], "Name") != "ApiId" || cfnAt(dims[0], "Value", "Ref") != "HttpApi" {
					t.Errorf("%s: %v is not a metric of this stack's API", id, metric)
				}
				series[id] = fmt.Sprint(cfnAt(metric, "MetricName"))
			}
			if cfnAt(m, "ReturnData") == true {
				returned = append(returned, fmt.Sprint(cfnAt(m, "Expression")))
			}
		}
		if fmt.Sprint(series) != "map[errors:5xx requests:Count]" || len(returned) != 1 ||
			!strings.Contains(returned[0], "errors / requests") {
			t.Errorf("the 5xx alarm reads %v and returns %v, want errors / requests of 5xx and Count", series, returned)
		}
		if want := 2*len(resourcesOf(cfn, "AWS::Lambda::Function")) + 3; len(alarms) != want {
			t.Errorf("%d alarms, want %d", len(alarms), want)
		}
	}
}

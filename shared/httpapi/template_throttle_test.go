package httpapi_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"mediator/shared/config"
	"mediator/shared/httpapi"
)

// nodeThrottle is the formula of template.yaml's FleetSize description, written here once to
// check what the template wrote out: a node heartbeats every LEASE_TTL/3 (config's cadence, the
// one the agents are told), so a fleet sends fleet/(TTL/3) heartbeats a second; twice that for
// retries, twice again for the calls later releases add to the node routes; the burst holds two
// seconds of the rate.
func nodeThrottle(fleet int, ttl time.Duration) (rate, burst int) {
	cadence := config.Config{LeaseTTL: ttl}.HeartbeatEvery()
	rate = int(math.Ceil(4 * float64(fleet) / cadence.Seconds()))
	return rate, 2 * rate
}

// expectedThrottles are the rate and burst each route must have, by its caller: the node routes
// the fleet's (NodeRateLimit and NodeBurstLimit when given, else FleetSize's at the default TTL),
// the people's ClientRateLimit and ClientBurstLimit, the public ones PublicRouteRateLimit.
func expectedThrottles(t *testing.T, values map[string]any) map[string][2]string {
	t.Helper()
	number := func(name string) int {
		n, err := strconv.Atoi(fmt.Sprint(values[name]))
		if err != nil {
			t.Fatalf("%s = %v", name, values[name])
		}
		return n
	}
	nodeRate, nodeBurst := number("NodeRateLimit"), number("NodeBurstLimit")
	if nodeRate == 0 {
		nodeRate, nodeBurst = nodeThrottle(number("FleetSize"), time.Duration(number("LeaseTtlSeconds"))*time.Second)
	}
	want := map[string][2]string{}
	for _, r := range httpapi.Routes {
		switch r.Caller {
		case httpapi.NodeCaller:
			want[r.Key()] = [2]string{strconv.Itoa(nodeRate), strconv.Itoa(nodeBurst)}
		case httpapi.PeopleCaller:
			want[r.Key()] = [2]string{fmt.Sprint(values["ClientRateLimit"]), fmt.Sprint(values["ClientBurstLimit"])}
		case httpapi.AnyoneCaller:
			want[r.Key()] = [2]string{fmt.Sprint(values["PublicRouteRateLimit"]), fmt.Sprint(values["PublicRouteRateLimit"])}
		default:
			t.Fatalf("%s: caller %q is none the template knows", r.Key(), r.Caller)
		}
	}
	return want
}

// throttleFindings compare the API stage SAM's transform made, resolved as CloudFormation
// would, with expectedThrottles: the default route settings are the people's, and exactly the
// node and public routes have settings of their own.
func throttleFindings(t *testing.T, cfn map[string]any, resolve cfnEval, values map[string]any) []string {
	t.Helper()
	stages := resourcesOf(cfn, "AWS::ApiGatewayV2::Stage")
	if len(stages) != 1 {
		return []string{fmt.Sprintf("stages %v, want one", stages)}
	}
	resolve.mappings, _ = cfnAt(cfn, "Mappings").(map[string]any)
	stage, err := resolve.eval(cfnAt(cfn, "Resources", stages[0], "Properties"))
	if err != nil {
		t.Fatal(err)
	}
	settings := func(s any) [2]string {
		return [2]string{fmt.Sprint(cfnAt(s, "ThrottlingRateLimit")), fmt.Sprint(cfnAt(s, "ThrottlingBurstLimit"))}
	}
	var out []string
	defaults := settings(cfnAt(stage, "DefaultRouteSettings"))
	own, _ := cfnAt(stage, "RouteSettings").(map[string]any)
	for key, want := range expectedThrottles(t, values) {
		got := defaults
		if s, ok := own[key]; ok {
			got = settings(s)
		}
		if got != want {
			out = append(out, fmt.Sprintf("%s: rate and burst %v, want %v", key, got, want))
		}
	}
	var selfSet []string
	for _, r := range httpapi.Routes {
		if r.Caller != httpapi.PeopleCaller {
			selfSet = append(selfSet, r.Key())
		}
	}
	slices.Sort(selfSet)
	if keys := slices.Sorted(maps.Keys(own)); !slices.Equal(keys, selfSet) {
		out = append(out, fmt.Sprintf("routes with a throttle of their own: %v, want the node and public routes %v", keys, selfSet))
	}
	return out
}

// The node routes' throttle follows the fleet: for 100, 1,000 and 10,000 nodes, what SAM's
// transform leaves for every route is the formula's, the people's and the public routes' their
// own parameters'; with another lease TTL, the rates given by hand.
func TestTemplateNodeThrottlesFollowTheFleet(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	for _, c := range []struct {
		name   string
		params map[string]string
		node   [2]int // the node routes' rate and burst, as this test expects them
	}{
		{"100 nodes", withParams(passwordMode, "FleetSize", "100"), [2]int{20, 40}},
		{"1,000 nodes", withParams(passwordMode, "FleetSize", "1000"), [2]int{200, 400}},
		{"10,000 nodes", withParams(passwordMode, "FleetSize", "10000", "ClientRateLimit", "80", "ClientBurstLimit", "160"), [2]int{2000, 4000}},
		{"10,000 nodes at a 30 s TTL", withParams(passwordMode, "LeaseTtlSeconds", "30", "NodeRateLimit", "4000", "NodeBurstLimit", "8000"), [2]int{4000, 8000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if failed, err := ruleFailures(tpl, c.params); err != nil || failed != nil {
				t.Fatalf("the rules refuse %v (%v)", failed, err)
			}
			values, err := parameterValues(tpl, c.params)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range routesFor(httpapi.NodeCaller) {
				if got := expectedThrottles(t, values)[r]; got != [2]string{strconv.Itoa(c.node[0]), strconv.Itoa(c.node[1])} {
					t.Fatalf("%s: the formula gives %v, this case says %v", r, got, c.node)
				}
			}
			cfn := transformed(t, c.params)
			conditions, _ := cfnAt(cfn, "Conditions").(map[string]any)
			for _, f := range throttleFindings(t, cfn, cfnEval{params: values, conditions: conditions}, values) {
				t.Error(f)
			}
		})
	}
	if n, _ := nodeThrottle(10000, 30*time.Second); n != 4000 {
		t.Errorf("at a 30 s TTL 10,000 nodes need %d requests a second, not the 4,000 the case above gives", n)
	}
}

// The table CloudFormation reads is the formula's: one row for every FleetSize the template
// allows, each the formula at the template's default TTL, which is config's default too.
func TestTemplateNodeThrottleTableIsTheFormula(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	ttl, err := strconv.Atoi(fmt.Sprint(cfnAt(tpl, "Parameters", "LeaseTtlSeconds", "Default")))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := config.Load(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://x/y"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(ttl)*time.Second != defaults.LeaseTTL {
		t.Fatalf("LeaseTtlSeconds defaults to %d s, LEASE_TTL_SECONDS to %v", ttl, defaults.LeaseTTL)
	}
	if cond := cfnAt(tpl, "Rules", "NodeThrottleFollowsTheCadence", "RuleCondition"); fmt.Sprint(cond) != fmt.Sprintf("map[Fn::Not:[map[Fn::Equals:[map[Ref:LeaseTtlSeconds] %d]]]]", ttl) {
		t.Errorf("NodeThrottleFollowsTheCadence applies when %v, want whenever LeaseTtlSeconds is not %d", cond, ttl)
	}
	table, _ := cfnAt(tpl, "Mappings", "NodeRouteThrottle").(map[string]any)
	sizes, _ := stringList(cfnAt(tpl, "Parameters", "FleetSize", "AllowedValues"))
	if keys := slices.Sorted(maps.Keys(table)); !slices.Equal(keys, slices.Sorted(slices.Values(sizes))) {
		t.Fatalf("NodeRouteThrottle has rows %v, FleetSize allows %v", keys, sizes)
	}
	for _, size := range sizes {
		fleet, _ := strconv.Atoi(size)
		rate, burst := nodeThrottle(fleet, time.Duration(ttl)*time.Second)
		row := table[size]
		if got := fmt.Sprint(cfnAt(row, "Rate"), "/", cfnAt(row, "Burst")); got != fmt.Sprint(rate, "/", burst) {
			t.Errorf("FleetSize %s: the table says %s, the formula %d/%d", size, got, rate, burst)
		}
		// Every route's limit must fit the Region's default account-wide one.
		if rate > 10000 || burst > 5000 {
			t.Errorf("FleetSize %s: %d/%d exceeds the account's default 10,000/5,000", size, rate, burst)
		}
	}
}

package request

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"

	"mediator/shared/problem"
	"mediator/shared/wire"
)

// shorthandRole is the one role of a run that gives top-level needs.
const shorthandRole = "main"

// Submit decodes POST /v1/runs. It returns the run to store — without its owner, which the
// handler knows — or every problem found.
func Submit(body []byte) (wire.NewRun, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return wire.NewRun{}, errs
	}
	var r wire.NewRun
	r.RunID = id(o, "run_id")
	priority, _ := o.integer("priority", wire.DefaultPriority, 0, wire.MaxPriority)
	r.Priority = int(priority)
	r.Roles = roles(o)
	r.HoldSeconds = optionalInt(o, "hold_seconds", wire.MaxHoldSecondsLimit)
	if _, hasHold := o.get("hold_seconds", false); hasHold {
		hold(o)
	} else {
		r.Steps = steps(o, r.Roles)
	}
	maxAttempts, _ := o.integer("max_attempts", 1, 1, wire.MaxAttempts)
	r.MaxAttempts = int(maxAttempts)
	if r.HoldSeconds != nil && r.MaxAttempts > 1 {
		o.fail("max_attempts", "a hold is placed once: max_attempts must be 1")
	}
	r.TimeoutSeconds = optionalInt(o, "timeout_seconds", wire.MaxTimeoutSeconds)
	r.QueueTimeoutSeconds = optionalInt(o, "queue_timeout_seconds", wire.MaxQueueWaitSeconds)
	r.WaitForCapacity = o.boolean("wait_for_capacity")
	r.Metadata, _ = o.raw("metadata", wire.MaxMetadataBytes, true)
	if r.Metadata == nil {
		r.Metadata = json.RawMessage(`{}`)
	}
	o.done()
	if len(errs) > 0 {
		return wire.NewRun{}, errs
	}
	r.RequestHash = hashRun(r)
	return r, nil
}

// hold checks what a hold may not say: its work is a person's, so it has no steps, its length
// is hold_seconds (no timeout_seconds), and a hold that lost a node is not tried again (no
// max_attempts above 1, checked in Submit: the person would find another board under them).
func hold(o *object) {
	if _, has := o.get("steps", false); has {
		o.fail("steps", "a hold has no steps: give hold_seconds or steps, not both")
	}
	if _, has := o.get("timeout_seconds", false); has {
		o.fail("timeout_seconds", "a hold's length is hold_seconds")
	}
}

// id reads a required identifier in IDPattern's shape.
func id(o *object, key string) string {
	s, ok := o.str(key, true)
	if ok && !wire.IDPattern.MatchString(s) {
		o.fail(key, "must match "+wire.IDPattern.String())
		return ""
	}
	return s
}

// roles reads either `roles` or the one-role shorthand `needs`, sorted by name.
func roles(o *object) []wire.NewRole {
	rolesV, hasRoles := o.get("roles", false)
	needsV, hasNeeds := o.get("needs", false)
	switch {
	case hasRoles && hasNeeds:
		o.fail("needs", "give either roles or needs (the one-role shorthand), not both")
		return nil
	case hasNeeds:
		return []wire.NewRole{{Name: shorthandRole, Needs: labels(o, "needs", needsV)}}
	case !hasRoles:
		o.fail("roles", "is required (or needs, for a run on one node)")
		return nil
	}
	ro := newObject(rolesV, "roles", o.errs)
	if ro == nil {
		return nil
	}
	if len(ro.m) == 0 || len(ro.m) > wire.MaxRoles {
		o.fail("roles", fmt.Sprintf("must have from 1 to %d roles", wire.MaxRoles))
		return nil
	}
	names := make([]string, 0, len(ro.m))
	for name := range ro.m {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []wire.NewRole
	for _, name := range names {
		ro.read[name] = true
		if !wire.NamePattern.MatchString(name) {
			ro.fail(name, "a role name must match "+wire.NamePattern.String())
			continue
		}
		role := newObject(ro.m[name], join("roles", name), o.errs)
		if role == nil {
			continue
		}
		needsV, _ := role.get("needs", true)
		out = append(out, wire.NewRole{Name: name, Needs: labels(role, "needs", needsV)})
		role.done()
	}
	return out
}

// labels reads a role's needs: a set of labels, sorted and without duplicates.
func labels(o *object, key string, v any) []string { return labelsUpTo(o, key, v, wire.MaxNeeds) }

// labelsUpTo reads a list of at most limit labels, sorted and without duplicates.
func labelsUpTo(o *object, key string, v any, limit int) []string {
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		o.fail(key, "must be an array of labels")
		return nil
	}
	if len(list) > limit {
		o.fail(key, fmt.Sprintf("must have at most %d labels", limit))
		return nil
	}
	set := map[string]bool{}
	for i, v := range list {
		s, ok := v.(string)
		if !ok || !wire.LabelPattern.MatchString(s) {
			o.failAt(item(o.path, key, i), "must be a label matching "+wire.LabelPattern.String())
			continue
		}
		set[s] = true
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func steps(o *object, roles []wire.NewRole) []wire.NewStep {
	list, ok := o.array("steps", true, wire.MaxSteps)
	if !ok {
		return nil
	}
	if len(list) == 0 {
		o.fail("steps", "must have at least one step")
		return nil
	}
	known := map[string]bool{}
	for _, r := range roles {
		known[r.Name] = true
	}
	shorthand := len(roles) == 1 && roles[0].Name == shorthandRole
	var out []wire.NewStep
	index := map[string]int{}
	for i, v := range list {
		path := fmt.Sprintf("steps[%d]", i)
		so := newObject(v, path, o.errs)
		if so == nil {
			continue
		}
		st := wire.NewStep{ID: name(so, "id")}
		role, hasRole := so.str("role", false)
		switch {
		case !hasRole && shorthand:
			role = shorthandRole
		case !hasRole:
			so.fail("role", "is required")
		case len(roles) > 0 && !known[role]:
			so.fail("role", fmt.Sprintf("names no role of this run (%q)", role))
		}
		st.Role = role
		st.After = afterList(so)
		st.Spec, _ = so.raw("spec", wire.MaxSpecBytes, true)
		infraExitCodes(so)
		if st.Spec == nil {
			st.Spec = json.RawMessage(`{}`)
		}
		retries, _ := so.integer("retries", 0, 0, wire.MaxRetries)
		st.Retries = int(retries)
		so.done()
		if st.ID != "" {
			if _, dup := index[st.ID]; dup {
				so.fail("id", fmt.Sprintf("duplicate step id %q", st.ID))
			}
			index[st.ID] = len(out)
		}
		out = append(out, st)
	}
	checkGraph(o, out, index)
	for _, r := range roles {
		if !hasStepFor(out, r.Name) {
			o.failAt(join("roles", r.Name), "has no step: every role needs at least one")
		}
	}
	return out
}

func hasStepFor(steps []wire.NewStep, role string) bool {
	for _, s := range steps {
		if s.Role == role {
			return true
		}
	}
	return false
}

func name(o *object, key string) string {
	s, ok := o.str(key, true)
	if ok && !wire.NamePattern.MatchString(s) {
		o.fail(key, "must match "+wire.NamePattern.String())
		return ""
	}
	return s
}

func afterList(so *object) []string {
	list, ok := so.array("after", false, wire.MaxSteps)
	if !ok {
		return []string{}
	}
	seen := map[string]bool{}
	out := []string{}
	for i, v := range list {
		s, isStr := v.(string)
		if !isStr || !wire.NamePattern.MatchString(s) {
			so.failAt(item(so.path, "after", i), "must be a step id")
			continue
		}
		if seen[s] {
			so.failAt(item(so.path, "after", i), fmt.Sprintf("names %q twice", s))
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// checkGraph: every `after` names a step of this run, and the steps form no cycle.
func checkGraph(o *object, steps []wire.NewStep, index map[string]int) {
	for i, s := range steps {
		for j, a := range s.After {
			if _, ok := index[a]; !ok {
				o.failAt(fmt.Sprintf("steps[%d].after[%d]", i, j), fmt.Sprintf("names no step of this run (%q)", a))
			} else if a == s.ID {
				o.failAt(fmt.Sprintf("steps[%d].after[%d]", i, j), "a step cannot wait for itself")
			}
		}
	}
	// Kahn: whatever cannot be ordered is on a cycle (or waits for one).
	waiting := make([]int, len(steps))
	dependents := map[string][]int{}
	for i, s := range steps {
		for _, a := range s.After {
			if _, ok := index[a]; ok && a != s.ID {
				waiting[i]++
				dependents[a] = append(dependents[a], i)
			}
		}
	}
	var ready []int
	for i, w := range waiting {
		if w == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		for _, d := range dependents[steps[i].ID] {
			if waiting[d]--; waiting[d] == 0 {
				ready = append(ready, d)
			}
		}
	}
	for i, w := range waiting {
		if w > 0 {
			o.failAt(fmt.Sprintf("steps[%d].after", i), "is part of a cycle: these steps wait for each other")
		}
	}
}

func optionalInt(o *object, key string, maxValue int64) *int {
	v, set := o.integer(key, 0, 1, maxValue)
	if !set {
		return nil
	}
	n := int(v)
	return &n
}

// hashRun is the fingerprint of a submission: the same request again (in any key order, with
// the shorthand or without) hashes the same; any difference in what would run does not.
//
// The priority counts only when it is not the default, so that a run stored before runs had a
// priority still answers 200 to the same request again.
func hashRun(r wire.NewRun) []byte {
	var priority *int
	if r.Priority != wire.DefaultPriority {
		priority = &r.Priority
	}
	canonical, _ := json.Marshal(struct {
		RunID     string
		Roles     []wire.NewRole
		Steps     []wire.NewStep
		Max       int
		Timeout   *int
		QueueWait *int
		Wait      bool
		Meta      json.RawMessage
		Priority  *int `json:",omitempty"`
		Hold      *int `json:",omitempty"`
	}{r.RunID, r.Roles, r.Steps, r.MaxAttempts, r.TimeoutSeconds, r.QueueTimeoutSeconds, r.WaitForCapacity, r.Metadata, priority, r.HoldSeconds})
	sum := sha256.Sum256(canonical)
	return sum[:]
}

// infraExitCodes checks a step spec's infra_exit_codes, the one key of the opaque spec the
// server reads: the exit codes by which a lab's scripts say the machine failed, not the test
// (the agent then reports "failure": "infra", which counts against the node). Refused at submit,
// a bad list would otherwise fail every run of the spec on every node it reached.
func infraExitCodes(so *object) {
	spec, isObj := so.m["spec"].(map[string]any)
	if !isObj {
		return
	}
	v, has := spec["infra_exit_codes"]
	if !has {
		return
	}
	rule := fmt.Sprintf("must be a list of at most %d distinct whole numbers from 1 to %d (exit 0 is a success)",
		wire.MaxInfraExitCodes, wire.MaxExitCode)
	list, isList := v.([]any)
	ok := isList && len(list) <= wire.MaxInfraExitCodes
	seen := map[int64]bool{}
	for _, c := range list {
		n, isNum := c.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || i < 1 || i > wire.MaxExitCode || seen[i] {
			ok = false
			break
		}
		seen[i] = true
	}
	if !ok {
		so.failAt(join(join(so.path, "spec"), "infra_exit_codes"), rule)
	}
}

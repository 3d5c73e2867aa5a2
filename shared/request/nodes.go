package request

import (
	"fmt"
	"unicode"

	"mediator/shared/problem"
	"mediator/shared/wire"
)

// Heartbeat decodes PUT /v1/nodes/{node_id}: {"boot_id", "labels", "draining"}.
func Heartbeat(nodeID string, body []byte) (wire.Heartbeat, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return wire.Heartbeat{}, errs
	}
	p := wire.Heartbeat{NodeID: nodeID, BootID: id(o, "boot_id"), Labels: []string{}}
	if v, ok := o.get("labels", false); ok {
		if ls := labelsUpTo(o, "labels", v, wire.MaxLabels); ls != nil {
			p.Labels = ls
		}
		if list, isList := v.([]any); isList {
			for i, l := range list {
				if s, isStr := l.(string); isStr && wire.ImplicitLabel(s) {
					o.failAt(item(o.path, "labels", i), "node_id is the server's: every node carries node_id=<its id>, and no advert may say it")
				}
			}
		}
	} else if _, present := o.m["labels"]; present {
		// null could mean "keep them" as well as "none", and taken as none it would drop a
		// node's every label: refused, as [] says none.
		o.fail("labels", "must be an array of labels (send [] for none)")
	}
	p.Draining = o.boolean("draining")
	p.Unhealthy = reasonText(o, "unhealthy", wire.MaxUnhealthyBytes)
	if _, present := o.m["unhealthy"]; present && p.Unhealthy == "" && len(errs) == 0 {
		// "" would read as "healthy" to one reader and "unhealthy, no reason" to another.
		o.fail("unhealthy", "must be a reason, or absent when the node's checks pass")
	}
	o.done()
	if len(errs) > 0 {
		return wire.Heartbeat{}, errs
	}
	return p, nil
}

// Quarantine decodes POST /v1/nodes/{node_id}/quarantine: {"reason"}, optional (an empty body
// is a quarantine without one).
func Quarantine(body []byte) (string, []problem.FieldError) {
	if len(body) == 0 {
		return "", nil
	}
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return "", errs
	}
	reason := reasonText(o, "reason", wire.MaxUnhealthyBytes)
	o.done()
	return reason, errs
}

// reasonText reads a reason a person reads in a node's view: a string of at most limit bytes
// with no control characters, which would let it forge lines of a terminal's table.
func reasonText(o *object, key string, limit int) string {
	s, ok := o.str(key, false)
	if !ok {
		return ""
	}
	if len(s) > limit {
		o.fail(key, fmt.Sprintf("must be at most %d bytes", limit))
		return ""
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			o.fail(key, "must be printable text: no control characters")
			return ""
		}
	}
	return s
}

// HealthCheck decodes PUT /v1/health-checks/{name}: {needs, steps, every_seconds?} — the nodes
// it applies to, a one-role run's steps (their role may be left out), and how often it runs on
// a node. Its role is named HealthCheckRole.
func HealthCheck(name string, body []byte) (wire.HealthCheck, []problem.FieldError) {
	var errs []problem.FieldError
	if !wire.IDPattern.MatchString(name) {
		errs = append(errs, problem.FieldError{Path: "name", Message: "must match " + wire.IDPattern.String()})
	}
	o := root(body, &errs)
	if o == nil {
		return wire.HealthCheck{}, errs
	}
	if _, has := o.m["roles"]; has {
		o.fail("roles", "a health check has one role, on the node it checks: give its needs")
	}
	if _, has := o.m["needs"]; !has {
		o.fail("needs", "is required: the labels of the nodes it applies to")
	}
	var c wire.HealthCheck
	c.Name = name
	roles := roles(o)
	c.Steps = steps(o, roles)
	if len(roles) == 1 {
		c.Needs = roles[0].Needs
	}
	for i := range c.Steps {
		c.Steps[i].Role = wire.HealthCheckRole
	}
	c.EverySeconds = optionalInt(o, "every_seconds", wire.MaxHealthCheckEverySeconds)
	o.done()
	if len(errs) > 0 {
		return wire.HealthCheck{}, errs
	}
	return c, nil
}

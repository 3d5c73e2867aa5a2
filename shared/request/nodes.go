package request

import (
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
	} else if _, present := o.m["labels"]; present {
		// null could mean "keep them" as well as "none", and taken as none it would drop a
		// node's every label: refused, as [] says none.
		o.fail("labels", "must be an array of labels (send [] for none)")
	}
	p.Draining = o.boolean("draining")
	o.done()
	if len(errs) > 0 {
		return wire.Heartbeat{}, errs
	}
	return p, nil
}

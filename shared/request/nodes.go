package request

import (
	"mediator/shared/problem"
	"mediator/shared/store"
)

// MaxLabels bounds a node's advert (the schema holds the same bound).
const MaxLabels = 64

// Heartbeat decodes PUT /v1/nodes/{node_id}: {"boot_id", "labels", "draining"}.
func Heartbeat(nodeID string, body []byte) (store.HeartbeatParams, []problem.FieldError) {
	var errs []problem.FieldError
	o := root(body, &errs)
	if o == nil {
		return store.HeartbeatParams{}, errs
	}
	p := store.HeartbeatParams{NodeID: nodeID, BootID: id(o, "boot_id"), Labels: []string{}}
	if v, ok := o.get("labels", false); ok {
		if ls := labelsUpTo(o, "labels", v, MaxLabels); ls != nil {
			p.Labels = ls
		}
	}
	p.Draining = o.boolean("draining")
	o.done()
	if len(errs) > 0 {
		return store.HeartbeatParams{}, errs
	}
	return p, nil
}

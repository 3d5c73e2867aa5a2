package httpapi

import (
	"slices"

	"mediator/shared/store"
)

// hintNodes marks nodes whose work this call's commit changed — a run placed on them, their
// running steps cancelled, their hold ended, their node drained — for afterCommit to tell them
// to look now. A hint is only ever a "look now": the heartbeat's answer stays the truth, so a
// node marked that turns out to have nothing new costs one heartbeat, and one not marked
// finds its work at its cadence, as without push.
func (c *call) hintNodes(ids ...string) { c.hints = append(c.hints, ids...) }

// hintRun marks the nodes of a run's roles.
func (c *call) hintRun(r store.Run) {
	for _, id := range r.Assigned {
		c.hintNodes(id)
	}
}

// sendHints tells the marked nodes, and those the wake placed runs on, to look now, within
// push.Budget: after the wake, so that what the node reads is already committed. The node
// the wake handed its run to in this very answer (a report's next_run) is left out: it has it.
func (c *call) sendHints(woke store.WakeResult, p store.WakeParams) {
	nodes := append(slices.Clip(c.hints), woke.Placed...)
	if woke.HandedOver != nil && p.HandOver != nil {
		nodes = slices.DeleteFunc(nodes, func(id string) bool { return id == p.HandOver.NodeID })
	}
	c.hints = nil
	c.d.Hinter.Hint(c.ctx, nodes...)
}

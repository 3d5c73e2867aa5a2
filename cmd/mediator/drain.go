package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"mediator/shared/client"
)

func drainCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "drain NODE",
		Short:   "Stop new work going to a node; it finishes the lease it holds (admins)",
		GroupID: "fleet",
		Long: `Drain a node: the queue places nothing more on it, and it finishes the lease it holds.
Its agent keeps running, and learns of the drain from its next heartbeat; its own heartbeat
cannot lift it. mediator undrain NODE lifts it.`,
		Args: oneArg("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			n, err := api.Drain(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printNode(n)
		},
	}
}

func undrainCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "undrain NODE",
		Short:   "Lift an admin's drain of a node (admins)",
		GroupID: "fleet",
		Long: `Lift an admin's drain: the node takes work again, unless its own agent is draining it
(stopping).`,
		Args: oneArg("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			n, err := api.Undrain(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printNode(n)
		},
	}
}

func (a *app) printNode(n *client.NodeReply) error {
	if a.json() {
		writeBody(a.stdout, n.Body)
		return nil
	}
	node := n.Node
	id, st := visible(node.NodeID), visible(node.State)
	switch {
	case node.DrainRequestedBy != nil:
		fmt.Fprintf(a.stdout, "node %s: %s, drained by %s: it takes no new work\n", id, st, visible(*node.DrainRequestedBy))
	case node.Draining:
		fmt.Fprintf(a.stdout, "node %s: %s; no admin's drain, but its agent drains it\n", id, st)
	default:
		fmt.Fprintf(a.stdout, "node %s: %s, not draining: it takes work\n", id, st)
	}
	return nil
}

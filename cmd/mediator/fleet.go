package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func queueCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "queue",
		Short:   "Show the queue: per kind of run, how many wait, for how long, and who could serve them",
		GroupID: "fleet",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			q, err := api.Queue(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, q.Body)
				return nil
			}
			if len(q.Queue) == 0 {
				fmt.Fprintln(a.stdout, "the queue is empty")
				return nil
			}
			t := &table{header: []string{"NEEDS", "QUEUED", "BY PRIORITY", "OLDEST", "WAITING", "CAPABLE NODES", "LIVE", "AVAILABLE", "PLACEABLE NOW", "WHY"}}
			for _, e := range q.Queue {
				var shape, prios []string
				for _, role := range e.Needs {
					shape = append(shape, needs(role))
				}
				for _, p := range e.Priorities {
					prios = append(prios, fmt.Sprintf("%d×%d", p.Queued, p.Priority))
				}
				why := ""
				if e.Waiting != nil {
					why = e.Waiting.Reason
				}
				t.add(strings.Join(shape, " + "), fmt.Sprint(e.Queued), strings.Join(prios, " "), e.OldestRunID,
					short(seconds(e.OldestWaitSeconds)), fmt.Sprint(e.CapableNodes), fmt.Sprint(e.LiveNodes),
					fmt.Sprint(e.AvailableNodes), yesNo(e.PlaceableNow), why)
			}
			t.write(a.stdout, false)
			fmt.Fprintf(a.stdout, "fleet: %s, %d live\n", plural(q.Fleet.Nodes, "node"), q.Fleet.Live)
			return nil
		},
	}
}

func nodesCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "nodes",
		Short:   "List the fleet's nodes: state, health, drain, the run each holds (admins)",
		GroupID: "fleet",
		Long: `List the fleet's nodes. HEALTH is healthy, suspect (infra failures in a row: INFRA) or
quarantined (it takes no new lease), WHY the reason and who quarantined it; DRAIN who drains
it; RUN the run whose lease it holds. mediator node ID shows one with its history.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			n, err := api.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, n.Body)
				return nil
			}
			if len(n.Nodes) == 0 {
				fmt.Fprintln(a.stdout, "no nodes")
				return nil
			}
			now := a.now()
			t := &table{header: []string{"NODE", "STATE", "HEALTH", "INFRA", "DRAIN", "RUN", "ROLE", "SINCE", "LABELS", "BOOT", "LAST SEEN", "WHY"}, coloured: []int{1, 2}}
			for _, node := range n.Nodes {
				t.add(node.NodeID, node.State, healthOf(node), fmt.Sprint(node.InfraFailures), drainCell(node), deref(node.RunID),
					deref(node.Role), agoPtr(node.LeasedAt, now), strings.Join(node.Labels, ","), node.BootID, ago(node.LastSeenAt, now), whyCell(node))
			}
			t.write(a.stdout, a.colour(a.stdoutTTY))
			return nil
		},
	}
}

func leasesCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "leases",
		Short:   "List the leases: which run holds which node, until when (admins)",
		GroupID: "fleet",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			l, err := api.ListLeases(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, l.Body)
				return nil
			}
			if len(l.Leases) == 0 {
				fmt.Fprintln(a.stdout, "no leases")
				return nil
			}
			now := a.now()
			t := &table{header: []string{"NODE", "RUN", "ROLE", "EPOCH", "EXPIRES", "ALIVE"}, coloured: []int{5}}
			for _, lease := range l.Leases {
				t.add(lease.NodeID, lease.RunID, lease.Role, fmt.Sprint(lease.Epoch), ago(lease.ExpiresAt, now), yesNo(lease.Alive))
			}
			t.write(a.stdout, a.colour(a.stdoutTTY))
			return nil
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural is n things, "1 node" or "3 nodes".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

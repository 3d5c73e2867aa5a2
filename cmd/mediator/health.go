package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mediator/shared/client"
)

func nodeCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "node ID",
		Short:   "Show a node: its state, health, drain, and recent health changes and leases (admins)",
		GroupID: "fleet",
		Args:    oneArg("node id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			d, err := api.GetNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, d.Body)
				return nil
			}
			a.printNodeDetail(d)
			return nil
		},
	}
}

func (a *app) printNodeDetail(d *client.NodeDetail) {
	w, n, now := a.stdout, d.Node, a.now()
	colour := a.colour(a.stdoutTTY)
	fmt.Fprintf(w, "node %s: %s, %s\n", visible(n.NodeID), colourState(colour, n.State), colourState(colour, healthOf(n)))
	fmt.Fprintf(w, "  %s\n", healthLine(n, now))
	if n.HealthCheckDue {
		fmt.Fprintln(w, "  a health check is due: it runs on the node before any other work")
	}
	fmt.Fprintf(w, "  %s\n", drainText(n))
	fmt.Fprintf(w, "  labels %s · boot %s · last seen %s\n", needs(n.Labels), visible(n.BootID), ago(n.LastSeenAt, now))
	if len(d.History) == 0 {
		return
	}
	fmt.Fprintln(w)
	t := &table{header: []string{"WHEN", "KIND", "FROM", "TO", "RUN", "REASON"}, coloured: []int{3}}
	for _, e := range d.History {
		t.add(ago(e.At, now), e.Kind, deref(e.From), deref(e.To), deref(e.RunID), oneLine(deref(e.Reason)))
	}
	t.write(w, colour)
}

// healthOf is a node's health, "healthy" from an API that shows none.
func healthOf(n client.NodeInfo) string {
	if n.Health == "" {
		return client.HealthHealthy
	}
	return n.Health
}

// healthLine says a node's health in words: since when, why, by whom, its infra failures.
func healthLine(n client.NodeInfo, now time.Time) string {
	var b strings.Builder
	b.WriteString(visible(healthOf(n)))
	if !n.HealthSince.IsZero() {
		b.WriteString(" since " + ago(n.HealthSince, now))
	}
	if n.QuarantinedBy != nil {
		b.WriteString(" by " + visible(*n.QuarantinedBy))
	}
	if r := deref(n.HealthReason); r != "" {
		b.WriteString(": " + visible(r))
	}
	fmt.Fprintf(&b, " · %d infra failure(s) in a row", n.InfraFailures)
	return b.String()
}

// drainText is who drains a node, in words.
func drainText(n client.NodeInfo) string {
	switch {
	case n.DrainRequestedBy != nil:
		return "drained by " + visible(*n.DrainRequestedBy) + ": it takes no new work"
	case n.Draining:
		return "its agent drains it"
	}
	return "not draining"
}

// drainCell is who drains a node, for a table.
func drainCell(n client.NodeInfo) string {
	switch {
	case n.DrainRequestedBy != nil:
		return *n.DrainRequestedBy
	case n.Draining:
		return "agent"
	}
	return ""
}

// whyCell is why a node is not healthy, for a table: the reason and who quarantined it.
func whyCell(n client.NodeInfo) string {
	var parts []string
	if r := deref(n.HealthReason); r != "" {
		parts = append(parts, oneLine(r))
	}
	if n.QuarantinedBy != nil {
		parts = append(parts, "by "+*n.QuarantinedBy)
	}
	if n.HealthCheckDue {
		parts = append(parts, "check due")
	}
	return strings.Join(parts, " · ")
}

func quarantineCommand(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "quarantine NODE --reason R",
		Short:   "Take a node out of scheduling until an admin lifts it (admins)",
		GroupID: "fleet",
		Long: `Quarantine a node: the queue places nothing more on it, and it finishes the lease it
holds. Only an admin lifts an admin's quarantine (mediator unquarantine NODE); its agent's own
checks cannot.`,
		Args: oneArg("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is needed: say why the node is taken out")
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			n, err := api.Quarantine(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			return a.printNodeHealth(n)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, kept with the node and in its history")
	return cmd
}

func unquarantineCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "unquarantine NODE",
		Short:   "Lift a node's quarantine: its health check runs first, where one applies (admins)",
		GroupID: "fleet",
		Long: `Lift a node's quarantine. Where a health check applies to the node, it runs on the
node first, before any other work: passing, the node is healthy; failing, it is quarantined
again with the check's failure as the reason. Where none applies, the node is healthy at once.`,
		Args: oneArg("NODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			n, err := api.Unquarantine(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printNodeHealth(n)
		},
	}
}

func (a *app) printNodeHealth(n *client.NodeReply) error {
	if a.json() {
		writeBody(a.stdout, n.Body)
		return nil
	}
	node := n.Node
	fmt.Fprintf(a.stdout, "node %s: %s, %s\n", visible(node.NodeID), visible(node.State), healthLine(node, a.now()))
	if node.HealthCheckDue {
		fmt.Fprintln(a.stdout, "  a health check is due: it runs on the node before any other work")
	}
	return nil
}

func healthCheckCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "health-check",
		Short:   "Register, list and remove the health checks that bring nodes back (admins)",
		GroupID: "fleet",
		Long: `A health check is a run Mediator places on one node, before any other work there: on a
node that became suspect (an infra failure), on one whose quarantine an admin lifts, and on a
healthy node whose last check is older than its every_seconds. It passes: the node is healthy,
its count of infra failures reset. It fails: the node is quarantined with the check's failure
as the reason. A check file (YAML or JSON):

  needs: [board=rpi4]          the nodes it applies to
  every_seconds: 86400         optional: run it on healthy nodes this often too
  steps:                       as a one-role run's
    - {id: usb, spec: {cmd: "lsusb | grep -q 'Hub'"}}`,
		Args: noArgs,
	}
	var file string
	put := &cobra.Command{
		Use:   "put NAME -f FILE",
		Short: "Register a health check, or replace the one of that name",
		Args:  oneArg("check's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usagef("-f FILE is needed (- for stdin)")
			}
			data, err := a.readFile(file)
			if err != nil {
				return usage(err)
			}
			body, err := loadObject(data)
			if err != nil {
				return usagef("%s: %v", fileName(file), err)
			}
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			c, err := api.PutHealthCheck(cmd.Context(), args[0], body)
			if err != nil {
				return err
			}
			return a.printCheck(c, "registered")
		},
	}
	put.Flags().StringVarP(&file, "file", "f", "", "the check, YAML or JSON (- for stdin)")
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a health check",
		Args:  oneArg("check's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.checkCall(cmd.Context(), "", func(api *client.Client) (*client.HealthCheckReply, error) {
				return api.GetHealthCheck(cmd.Context(), args[0])
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Remove a health check; runs of it already placed go on",
		Args:  oneArg("check's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.checkCall(cmd.Context(), "removed", func(api *client.Client) (*client.HealthCheckReply, error) {
				return api.DeleteHealthCheck(cmd.Context(), args[0])
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the health checks",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			l, err := api.ListHealthChecks(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				writeBody(a.stdout, l.Body)
				return nil
			}
			if len(l.HealthChecks) == 0 {
				fmt.Fprintln(a.stdout, "no health checks")
				return nil
			}
			t := &table{header: []string{"NAME", "NEEDS", "STEPS", "EVERY"}}
			for _, c := range l.HealthChecks {
				cell := ""
				if c.EverySeconds != nil && *c.EverySeconds > 0 {
					cell = short(seconds(float64(*c.EverySeconds)))
				}
				t.add(c.Name, needs(c.Needs), stepIDs(c.Steps), cell)
			}
			t.write(a.stdout, false)
			return nil
		},
	}
	cmd.AddCommand(put, get, list, del)
	return cmd
}

func (a *app) checkCall(ctx context.Context, did string, call func(*client.Client) (*client.HealthCheckReply, error)) error {
	api, err := a.client(ctx)
	if err != nil {
		return err
	}
	c, err := call(api)
	if err != nil {
		return err
	}
	return a.printCheck(c, did)
}

func (a *app) printCheck(c *client.HealthCheckReply, did string) error {
	if a.json() {
		writeBody(a.stdout, c.Body)
		return nil
	}
	h := c.HealthCheck
	line := "health check " + visible(h.Name)
	if did != "" {
		line += " " + did
	}
	fmt.Fprintf(a.stdout, "%s: needs %s · steps %s · %s\n", line, needs(h.Needs), visible(stepIDs(h.Steps)), every(h.EverySeconds))
	return nil
}

func stepIDs(steps []client.StepRequest) string {
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID
	}
	return strings.Join(ids, ",")
}

func every(s *int) string {
	if s == nil || *s == 0 {
		return "when a node is suspect or its quarantine is lifted"
	}
	return fmt.Sprintf("every %s, and when a node is suspect or its quarantine is lifted", short(seconds(float64(*s))))
}

// loadObject is a file holding one object, YAML or JSON, as the JSON body to send: JSON as
// written, YAML as the JSON of the same values.
func loadObject(data []byte) ([]byte, error) {
	data = bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(data) == 0 {
		return nil, errors.New("the file is empty")
	}
	if data[0] == '{' && json.Valid(data) {
		return data, nil
	}
	doc, err := yamlValue(data)
	if err != nil {
		return nil, err
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("the file must be one object (a YAML mapping or a JSON object)")
	}
	return json.Marshal(doc)
}

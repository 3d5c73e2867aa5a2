package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"mediator/localdev/fleet"
	"mediator/shared/client"
)

// api is a client of the stack as token.
func api(base, token string) (*client.Client, error) {
	return client.New(base, client.WithToken(token))
}

// waitUntil asks ok every 100 ms until it holds, for at most a minute.
func waitUntil(ctx context.Context, what string, ok func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		done, err := ok(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within a minute", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// live waits until the fleet lists n nodes not offline.
func live(ctx context.Context, admin *client.Client, n int) error {
	return waitUntil(ctx, fmt.Sprintf("%d live nodes", n), func(ctx context.Context) (bool, error) {
		l, err := admin.ListNodes(ctx)
		if err != nil {
			return false, err
		}
		up := 0
		for _, node := range l.Nodes {
			if node.State != "offline" {
				up++
			}
		}
		return up >= n, nil
	})
}

// settled waits until the run is in one of states.
func settled(ctx context.Context, c *client.Client, runID string, states ...string) error {
	return waitUntil(ctx, "run "+runID+" in "+fmt.Sprint(states), func(ctx context.Context) (bool, error) {
		d, err := c.GetRun(ctx, runID)
		if err != nil {
			return false, err
		}
		for _, s := range states {
			if d.Run.State == s {
				return true, nil
			}
		}
		return false, nil
	})
}

func cmd(script string) map[string]any { return map[string]any{"cmd": script} }

// simulated heartbeats nodes of localdev/fleet until ctx ends (they run what they are given by
// sleeping its "duration").
func simulated(ctx context.Context, wg *sync.WaitGroup, base string, labels []string, ids ...string) error {
	for _, id := range ids {
		n := &fleet.Node{ID: id, Labels: labels, Base: base, Token: "dev-node-" + id, Interval: 2 * time.Second}
		if _, err := n.Heartbeat(ctx); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); n.Run(ctx) }()
	}
	return nil
}

// register advertises nodes from..to-1 once each, sixteen at a time: the bench's fleet.
func register(ctx context.Context, base string, from, to int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := from; i < to; i++ {
		g.Go(func() error {
			id := fmt.Sprintf("node-%05d", i)
			n := &fleet.Node{ID: id, Labels: []string{fmt.Sprintf("board=b%d", i%7), fmt.Sprintf("rack=r%d", i/40)}, Base: base, Token: "dev-node-" + id}
			_, err := n.Heartbeat(ctx)
			return err
		})
	}
	return g.Wait()
}

// seed makes the stack the screenshots show: three real agents (two boards and a host), a
// simulated rack, runs done, failed, running and queued, a drained and a quarantined node.
func seed(ctx context.Context, base string, a *agents, wg *sync.WaitGroup) error {
	admin, err := api(base, "dev-admin")
	if err != nil {
		return err
	}
	alice, _ := api(base, "dev-client-alice")
	bob, _ := api(base, "dev-client-bob")
	for _, n := range [][]string{{"rpi-1", "board=rpi4", "lab=2"}, {"rpi-2", "board=rpi4", "lab=2"}, {"jetson-1", "board=jetson", "lab=2"}} {
		if err := a.start(n[0], n[1:]...); err != nil {
			return err
		}
	}
	if err := simulated(ctx, wg, base, []string{"board=rpi5", "lab=3"}, "rpi5-1", "rpi5-2", "rpi5-3", "rpi5-4", "rpi5-5"); err != nil {
		return err
	}
	if err := live(ctx, admin, 8); err != nil {
		return err
	}
	if _, err := alice.Submit(ctx, client.RunRequest{RunID: "build-1234", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{
		{ID: "flash", Spec: cmd(`echo flashing image v1.4.2; echo wrote 512 MiB; echo "image=v1.4.2" >> "$MEDIATOR_OUTPUTS"`)},
		{ID: "test", After: []string{"flash"}, Spec: cmd(`for t in boot net usb gpio; do echo "test $t: ok"; done`)},
	}}); err != nil {
		return err
	}
	if _, err := bob.Submit(ctx, client.RunRequest{RunID: "flaky-9", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{
		{ID: "probe", Spec: cmd(`echo probing /dev/ttyUSB0; echo "no answer from the board" >&2; exit 3`)},
	}}); err != nil {
		return err
	}
	if err := settled(ctx, alice, "build-1234", "SUCCEEDED"); err != nil {
		return err
	}
	if err := settled(ctx, bob, "flaky-9", "FAILED"); err != nil {
		return err
	}
	if _, err := bob.Submit(ctx, client.RunRequest{RunID: "soak-7",
		Roles: map[string]client.RoleRequest{"dut": {Needs: []string{"board=rpi4"}}, "host": {Needs: []string{"board=jetson"}}},
		Steps: []client.StepRequest{
			{ID: "boot", Role: "dut", Spec: cmd(`echo booting the dut; echo "ip=10.0.0.7" >> "$MEDIATOR_OUTPUTS"`)},
			{ID: "soak", Role: "dut", After: []string{"boot"}, Spec: cmd(`i=0; while :; do i=$((i+1)); echo "soak tick $i: load ok, 48.2 C"; sleep 1; done`)},
			{ID: "watch", Role: "host", After: []string{"boot"}, Spec: cmd(`while :; do echo "ping 10.0.0.7: 0.4 ms"; sleep 2; done`)},
		}}); err != nil {
		return err
	}
	if err := settled(ctx, bob, "soak-7", "RUNNING"); err != nil {
		return err
	}
	if _, err := alice.Submit(ctx, client.RunRequest{RunID: "nightly-88", Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{
		{ID: "suite", Spec: cmd(`while :; do echo "suite: case $RANDOM passed"; sleep 1; done`)},
	}}); err != nil {
		return err
	}
	if err := settled(ctx, alice, "nightly-88", "RUNNING"); err != nil {
		return err
	}
	for _, r := range []struct {
		c  *client.Client
		id string
	}{{alice, "regress-12"}, {bob, "bisect-3"}} {
		if _, err := r.c.Submit(ctx, client.RunRequest{RunID: r.id, Needs: []string{"board=rpi4"}, Steps: []client.StepRequest{{ID: "go", Spec: cmd(`echo go`)}}}); err != nil {
			return err
		}
	}
	carol, _ := api(base, "dev-client-carol")
	if _, err := carol.Submit(ctx, client.RunRequest{RunID: "perf-3", Needs: []string{"board=rpi5"}, Steps: []client.StepRequest{{ID: "bench", Spec: map[string]any{"duration": "30m"}}}}); err != nil {
		return err
	}
	if _, err := admin.Drain(ctx, "rpi5-4"); err != nil {
		return err
	}
	if _, err := admin.Quarantine(ctx, "rpi5-5", "usb hub resets under load"); err != nil {
		return err
	}
	return nil
}

package httpapi_test

import (
	"fmt"
	"sync"
	"testing"

	"mediator/localdev/apitest"
)

// Fifty heartbeats of one leased node race an admin removing it — in odd rounds as restarts
// under three boot ids: each heartbeat either lands before the removal or registers the node
// anew after it; the removal finds it or says 404. Never a 5xx: nothing here is the server's
// fault.
func TestHeartbeatsRaceTheNodesRemoval(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.PoolSize(32))
	for round := range 5 {
		node := fmt.Sprintf("n%d", round)
		env.Beat(node, "b1", false, "board")
		if resp := env.Do(alice, "POST", "/v1/runs", oneNodeRun("on-"+node, "board")); resp.Status != 201 {
			t.Fatalf("run on %s: %s", node, resp)
		}
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				boot := "b1"
				if round%2 == 1 {
					boot = fmt.Sprintf("b%d", 1+i%3)
				}
				if resp, _ := env.Beat(node, boot, false, "board"); resp.Status != 200 {
					t.Errorf("heartbeat %d of %s: %s", i, node, resp)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := env.Do(apitest.Admin, "DELETE", "/v1/nodes/"+node, nil); resp.Status != 200 && resp.Status != 404 {
				t.Errorf("remove %s: %s", node, resp)
			}
		}()
		wg.Wait()
	}
	env.CheckInvariants()
}

//go:build !linux

package main

import "testing"

// The agent's tests run on Linux only, and are built only there: here they fail, saying so,
// rather than go missing from the count.
func TestLinuxOnly(t *testing.T) {
	t.Fatal("the tests of mediator agent and of what starts agents (agent_test.go, agent_faults_test.go, jwt_test.go) run on Linux only, as the agent does")
}

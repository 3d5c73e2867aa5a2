//go:build !linux

package agent

import "testing"

// The agent's own tests run on Linux only, and are built only there: here they fail, saying so,
// rather than go missing from the count.
func TestLinuxOnly(t *testing.T) {
	t.Fatal("the agent's tests of its processes and outputs (procs_linux_test.go, output_test.go) run on Linux only, as the agent does")
}

//go:build !linux

package main

import "testing"

// The demo's tests run on Linux only, and are built only there: here they fail, saying so,
// rather than go missing from the count.
func TestLinuxOnly(t *testing.T) {
	t.Fatal("make demo's test starts mediator agent processes, which run on Linux only")
}

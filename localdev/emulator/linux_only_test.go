//go:build !linux

package emulator

import "testing"

// Some of the emulator's tests run on Linux only, and are built only there: here they fail,
// saying so, rather than go missing from the count.
func TestLinuxOnly(t *testing.T) {
	t.Fatal("the emulator's check of whose socket it listens on (listen_test.go) reads /proc, which only Linux has")
}

//go:build linux

package emulator

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// The emulator counts as listening only on a socket of its own: a port another process took
// before the emulator could bind it accepts connections too.
func TestListensOnKnowsWhoseSocketItIs(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	owns, known := listensOn(os.Getpid(), l.Addr().String())
	if !known || !owns {
		t.Fatalf("this process listens on %s, yet listensOn says it does not (known from /proc: %v)", l.Addr(), known)
	}
	other := exec.Command("sleep", "5")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	if owns, _ := listensOn(other.Process.Pid, l.Addr().String()); owns {
		t.Fatalf("another process is said to listen on %s", l.Addr())
	}
}

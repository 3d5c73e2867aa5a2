//go:build linux

package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// The health command passes by exiting 0; failing, its reason is its output's last line, or
// what ended it; past its time, its whole process group is killed.
func TestRunHealthCmd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := newGroups(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	env := append(os.Environ(), "WHAT=the hub")
	for _, tc := range []struct{ cmd, want string }{
		{"true", ""},
		{`echo checking; echo "$WHAT is gone" >&2; exit 3`, "the hub is gone"},
		{"exit 4", "the health command exited 4"},
		{`test "$(pwd)" = ` + dir + ` || echo "ran in $(pwd)"; false`, "the health command exited 1"},
		{"kill -9 $$", "the health command exited 137"},
	} {
		if got := g.RunHealthCmd(context.Background(), tc.cmd, dir, env, time.Minute); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.cmd, got, tc.want)
		}
	}
	// A background child holding the output open is killed with the group, not waited for.
	got := g.RunHealthCmd(context.Background(), "sleep 1000 & echo started; wait", dir, env, 100*time.Millisecond)
	if !strings.Contains(got, "did not finish within 100ms") {
		t.Fatalf("a hung command: %q", got)
	}
	// Its group is gone with it, and its record.
	if entries, _ := os.ReadDir(g.dir); len(entries) != 0 {
		t.Fatalf("records left: %v", entries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := g.RunHealthCmd(ctx, "sleep 1000", dir, env, time.Minute); !strings.Contains(got, "the agent is exiting") {
		t.Fatalf("stopped: %q", got)
	}
}

// statSpace reads the room of a real filesystem.
func TestStatSpace(t *testing.T) {
	s, err := statSpace(t.TempDir())
	if err != nil || s.TotalBytes == 0 || s.FreeBytes > s.TotalBytes {
		t.Fatalf("%+v %v", s, err)
	}
}

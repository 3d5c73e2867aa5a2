// Package mediatorbin builds the mediator command of this tree, for the demo, the console's
// screenshots and bench, and the command's own process tests, which run real agents from it.
package mediatorbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build builds the mediator binary into dir, with the go tool of the toolchain the caller was
// built by, so the agents are the code of this very tree, and answers its path. It builds by
// import path, so it works from any directory of the module (a test runs in its own).
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "mediator")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "mediator/cmd/mediator").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building mediator: %w\n%s", err, out)
	}
	return bin, nil
}

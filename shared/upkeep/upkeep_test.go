package upkeep_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The functions that serve no HTTP do not link the HTTP handlers: a cold start loads only
// what the function runs.
func TestUpkeepFunctionsDoNotLinkHTTP(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{"mediator/functions/reap", "mediator/functions/migrate"} {
		out, err := exec.Command("go", "list", "-deps", fn).Output()
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			t.Fatalf("go list -deps %s: %v\n%s", fn, err, exit.Stderr)
		} else if err != nil {
			t.Fatalf("go list -deps %s: %v", fn, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, fn) {
			t.Fatalf("go list -deps %s does not list the function itself: %s", fn, out)
		}
		if slices.Contains(deps, "mediator/shared/httpapi") {
			t.Errorf("%s depends on mediator/shared/httpapi", fn)
		}
	}
}

package main

import (
	"strings"
	"testing"
)

// `mediator runs --all` over a database of 5,000 refused runs and no queued one follows every
// page to the end and exits 0, as the client that submitted them and as an admin — before the
// tables have statistics and after (the plan of the list's statement follows them).
func TestRunsAllOverThousandsOfRefusedRuns(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	env.KeepStatistics()
	env.Heartbeat("n1", "b1", false, "board=rpi4")
	run := file(t, "run.yaml", "run_id: refused\nneeds: [gpu]\nsteps:\n  - {id: s}\n")
	expect(t, mediator(t, base, "", "submit", "-f", run), 1, "run refused: FAILED no_capable_node")
	env.CopyRun("refused", "refused-", 4999)
	if n := env.Count(`SELECT count(*) FROM runs WHERE owner = 'client:dev-client' AND reason = 'no_capable_node'`); n != 5000 {
		t.Fatalf("%d refused runs of the CLI's client", n)
	}
	for _, stats := range []string{"no statistics", "analyzed"} {
		if stats == "analyzed" {
			env.Exec(`ANALYZE`)
		}
		for _, token := range []string{"dev-client", "dev-admin"} {
			cmd, stdout, stderr := command(base, "", "runs", "--all")
			cmd.Env = append(cmd.Env, "MEDIATOR_TOKEN="+token) // the last of a name is the one used
			r := ended(t, cmd.Run(), stdout, stderr)
			if r.code != 0 {
				t.Fatalf("%s, as %s: %s", stats, token, r.String()[:min(len(r.String()), 600)])
			}
			if lines := strings.Count(r.stdout, "no_capable_node"); lines != 5000 || strings.Contains(r.stdout, "more:") {
				t.Fatalf("%s, as %s: %d refused runs listed, want 5000, and no next page", stats, token, lines)
			}
		}
	}
}

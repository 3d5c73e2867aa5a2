package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"mediator/shared/client"
)

// tookSuffix is the time a line of --wait ends with: when the command saw the change.
var tookSuffix = regexp.MustCompile(` · \d+(\.\d+)?(ms|s|m\d\ds|h\d\dm)$`)

// untimed is r's stdout with each line's time taken off.
func untimed(r result) string {
	ls := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for i, l := range ls {
		ls[i] = tookSuffix.ReplaceAllString(l, "")
	}
	return strings.Join(ls, "\n")
}

// Without a terminal, --wait prints a line per change, and loses none between two reads of
// the run: steps that all end before its first read are each said, in the order they ended.
func TestWaitWithoutATerminalSaysEveryStepEnd(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	node(t, base, "n1")
	run := file(t, "run.yaml", "run_id: quick\nneeds: [board=rpi4]\nsteps:\n  - {id: a}\n  - {id: b, after: [a]}\n  - {id: c, after: [b]}\n")
	r := mediator(t, base, "", "submit", "-f", run, "--wait")
	want := `run quick: RUNNING, placed on its nodes (201)
  main → n1
run quick: step a SUCCEEDED · steps 1/3
run quick: step b SUCCEEDED · steps 2/3
run quick: step c SUCCEEDED · steps 3/3
run quick: SUCCEEDED · steps 3/3`
	if r.code != 0 || untimed(r) != want {
		t.Fatalf("want exit 0 and\n%s\ngot %s", want, r)
	}
}

// A queued run's promotion, a step's failure and the steps it skipped are each a line, from the
// run's history and its steps' end times; the run's end says why, and exits 1.
func TestWaitWithoutATerminalSaysThePromotionAndTheFailure(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	said := node(t, base, "n1")
	expect(t, mediator(t, base, "", "submit", "-f", file(t, "first.yaml", "run_id: first\nneeds: [board=rpi4]\nsteps: [{id: s, spec: {duration: 1h}}]\n")),
		0, "(201)")
	second := file(t, "second.yaml", "run_id: second\nneeds: [board=rpi4]\nsteps:\n  - {id: flash, spec: {exit_code: 3}}\n  - {id: test, after: [flash]}\n")
	wait := start(t, base, "submit", "-f", second, "--wait")
	c := api(t, base, "dev-client")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for { // until the background submit has queued it
		_, err := c.GetRun(context.Background(), "second")
		var ae *client.Error
		if err == nil {
			break
		} else if !errors.As(err, &ae) || ae.Status != 404 {
			t.Fatal(err)
		}
		<-tick.C
	}
	said.waitFor("first/s started")
	if _, err := api(t, base, "dev-admin").Cancel(context.Background(), "first", client.CancelRequest{Force: true}); err != nil {
		t.Fatal(err)
	}
	r := wait()
	want := `run second: QUEUED at queue position 0 (202)
  waits: all_busy — every node that could serve a role is busy
    role main (board=rpi4): 1 busy (first)
run second: QUEUED → RUNNING (promoted) · steps 0/2
run second: step flash FAILED (exit 3) · steps 2/2
run second: step test SKIPPED · steps 2/2
run second: FAILED step_failed · steps 2/2
  step flash failed (exit 3)`
	if r.code != 1 || untimed(r) != want {
		t.Fatalf("want exit 1 and\n%s\ngot %s", want, r)
	}
}

//go:build linux

package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// stopReason is why the loop stops a step; a stronger one overrides a weaker.
type stopReason int

const (
	stopNone     stopReason = iota
	stopCancel              // the run is being cancelled: SIGTERM, SIGKILL after the grace; reported cancelled
	stopShutdown            // the agent is told to stop a second time: the same
	stopGuard               // the lease may expire before it is renewed: SIGKILL now; reported failed, lease_lost
	stopStale               // the lease is gone: SIGKILL now; nothing reported
)

func (s stopReason) String() string {
	return [...]string{"none", "cancel", "shutdown", "lease_guard", "lease_gone"}[s]
}

// runMode is what a runner does.
type runMode int

const (
	runStep         runMode = iota // run the step and report it
	reportCancelled                // report a step nobody here runs as cancelled
	reportLost                     // report a step nobody here runs as failed, lease_lost
)

// lostMessage is the message of a step killed because its lease could not be renewed. Such a
// failure is not reported as the machine's: the agent cannot tell its own network from an
// outage of the API, and a lease that was in fact lost the API counts itself.
const lostMessage = "lease_lost"

// shutdownReportFor bounds how long a stopping agent keeps trying to report.
const shutdownReportFor = 20 * time.Second

// shutdownLogWait bounds the last flush of a step's log when the agent is told to stop a second
// time: it exits within the cancel grace and a second, and the report goes first.
const shutdownLogWait = 500 * time.Millisecond

// errAbandoned: the report was given up, the work being dropped.
var errAbandoned = errors.New("abandoned: the work was dropped")

// runner is one step on this node, from its start to its last report, in a goroutine of its
// own. The loop stops it through kills; nothing else of it is shared.
type runner struct {
	a     *Agent
	step  client.NodeStep
	key   string
	epoch int64
	mode  runMode
	log   *slog.Logger
	kills chan stopReason
	asked stopReason // the loop's: the strongest reason sent

	reason    stopReason // the runner's: the strongest reason received
	stoppedAt time.Time

	// logFirst is the started report's batch of log upload URLs: nil when the stack keeps no
	// logs, and then nothing is uploaded. upload streams this try's log while it runs.
	logFirst *client.LogUpload
	upload   *Uploader
	sends    int // the tries the last report answered took
	// unhealthy is why the node's own checks failed when the step was to start, "" when they
	// passed: the step is then not run, and reported an infra failure saying why.
	unhealthy string
}

// stop asks the runner to stop (loop goroutine); false when it was asked as much before.
func (r *runner) stop(why stopReason) bool {
	if why <= r.asked {
		return false
	}
	r.asked = why
	r.kills <- why // at most one send per reason, which the buffer holds
	return true
}

func (r *runner) take(why stopReason) {
	if why > r.reason {
		r.reason = why
		r.stoppedAt = time.Now()
	}
}

// poll takes the stops sent so far.
func (r *runner) poll() {
	for {
		select {
		case why := <-r.kills:
			r.take(why)
		default:
			return
		}
	}
}

// pause waits d, or less when told to stop.
func (r *runner) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case why := <-r.kills:
		r.take(why)
	}
}

// result is a step's last report.
type result struct {
	status string
	// failure is a failed report's kind: client.FailureInfra when the machine could not run the
	// step, "" for a test failure (the API's default).
	failure  string
	exitCode *int
	message  string
	output   string
	outputs  map[string]string
	none     bool // nothing to report: the lease is gone
}

func (r *runner) run() {
	var d runnerDone
	switch r.mode {
	case reportCancelled:
		d = r.deliver(result{status: wire.ReportCancelled, message: "cancelled: the run was cancelled before this node ran the step"})
	case reportLost:
		d = r.deliver(result{status: wire.ReportFailed, message: lostMessage})
	default:
		d = r.life()
	}
	d.r = r
	r.a.events <- d
}

// life runs the step: started, the process, then its result.
func (r *runner) life() runnerDone {
	rep, _, err := r.send(client.ReportRequest{Status: wire.ReportStarted}, true)
	if err != nil {
		if errors.Is(err, errAbandoned) && (r.reason == stopCancel || r.reason == stopShutdown) {
			return r.deliver(r.before())
		}
		return r.refused(err)
	}
	r.logFirst = rep.Log
	if r.logFirst == nil && r.sends > 1 {
		r.logFirst = r.firstLogURLs()
	}
	spec, err := ParseSpec(r.step.Spec)
	if err != nil {
		// The submitter's mistake, not the machine's: a test failure.
		r.log.Warn("a spec the agent cannot run", "error", err.Error())
		return r.deliver(result{status: wire.ReportFailed, message: Text([]byte("the agent cannot run this spec: "+err.Error()), wire.MaxMessageBytes, false)})
	}
	if r.unhealthy != "" {
		msg := fmt.Sprintf("not run: node %s is unhealthy, by its own checks: %s", r.a.cfg.NodeID, r.unhealthy)
		r.log.Warn("the step is not run: the node is unhealthy", "reason", r.unhealthy)
		return r.deliver(result{status: wire.ReportFailed, failure: client.FailureInfra, message: Text([]byte(msg), wire.MaxMessageBytes, false)})
	}
	return r.deliver(r.execute(spec))
}

// before is the result of a step stopped before its process started.
func (r *runner) before() result {
	switch r.reason {
	case stopStale:
		return result{none: true}
	case stopGuard:
		return result{status: wire.ReportFailed, message: lostMessage}
	case stopShutdown:
		return result{status: wire.ReportCancelled, message: "cancelled: the agent was stopped before the step began"}
	}
	return result{status: wire.ReportCancelled, message: "cancelled: the run was cancelled before the step began"}
}

// execute runs the step's process to its end and says what to report.
func (r *runner) execute(spec Spec) (res result) {
	a, st := r.a, r.step
	// What stops a step from starting is the machine's failing — its disk, its programs, its
	// directories, its processes — unless the step's own names say otherwise (notOurs).
	failedAs := func(failure, format string, args ...any) result {
		msg := fmt.Sprintf(format, args...)
		r.log.Warn("the step could not start", "error", msg, "failure", cmp.Or(failure, client.FailureTest))
		return result{status: wire.ReportFailed, failure: failure, message: Text([]byte(msg), wire.MaxMessageBytes, false)}
	}
	failed := func(format string, args ...any) result { return failedAs(client.FailureInfra, format, args...) }
	notOurs := func(format string, args ...any) result { return failedAs("", format, args...) }
	name := fmt.Sprintf("%s+%s+%d", st.RunID, st.StepID, st.Attempt)
	own := filepath.Join(a.steps, name)
	_ = os.RemoveAll(own)
	if err := os.MkdirAll(own, 0o750); err != nil {
		return failed("the step's directory: %v", err)
	}
	defer func() {
		if res.status == wire.ReportFailed && st.KeepOnFailure {
			// The run keeps its failed boards: the directory stays with them (tidyKept).
			if err := os.Rename(own, filepath.Join(a.kept, name)); err == nil {
				return
			}
		}
		_ = os.RemoveAll(own)
	}()
	outputsPath, inputsPath := filepath.Join(own, "outputs"), filepath.Join(own, "inputs.json")
	inputs := st.Inputs
	if inputs == nil {
		inputs = map[string]map[string]string{}
	}
	data, _ := json.Marshal(inputs)
	if err := os.WriteFile(inputsPath, data, 0o640); err != nil {
		return failed("MEDIATOR_INPUTS: %v", err)
	}
	if err := os.WriteFile(outputsPath, nil, 0o660); err != nil {
		return failed("MEDIATOR_OUTPUTS: %v", err)
	}
	dir := spec.Workdir
	if dir == "" {
		dir = filepath.Join(own, "work")
		if err := os.Mkdir(dir, 0o750); err != nil {
			return failed("the step's directory: %v", err)
		}
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return failed("workdir %s is not a directory on node %s", dir, a.cfg.NodeID)
	}
	env, err := StepEnv(a.environ, st, a.cfg.NodeID, spec, outputsPath, inputsPath)
	if err != nil {
		return notOurs("%v", err)
	}
	path, argv, err := spec.program(env)
	if err != nil {
		return failed("%v", err)
	}
	header := fmt.Sprintf("=== %s run %s step %s attempt %d on node %s (boot %s)\n",
		time.Now().UTC().Format(time.RFC3339), st.RunID, st.StepID, st.Attempt, a.cfg.NodeID, a.boot)
	out, begin, from, err := a.out.open(st.RunID, st.StepID, st.Attempt, header)
	if err != nil {
		return failed("the step's output file: %v", err)
	}
	defer a.out.done(out)
	r.startLog(out, begin, from)
	defer r.endLog(out.Name()) // once: the paths that end before the process does
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir, Stdout: out, Stderr: out}
	r.poll()
	if r.reason != stopNone {
		return r.before()
	}
	var cgroup *os.File
	if a.cgroups != nil {
		if cgroup, err = a.cgroups.stepGroup(r.epoch); err != nil {
			return failed("the step's cgroup: %v", err)
		}
		defer removeStep(cgroup)
	}
	p, err := a.groups.spawn(cmd, st.RunID+"/"+st.StepID+"/"+strconv.Itoa(st.Attempt), cgroup)
	if cgroup != nil {
		cgroup.Close()
	}
	if err != nil {
		return failed("starting the step: %v", err)
	}
	r.log.Info("step started", "pgid", p.pgid, "output", out.Name())
	timedOut := r.watch(p, spec)
	ps, err := p.finish()
	var code *int // none when the process's status could not be had: the report omits it
	if ps != nil {
		c := exitCode(ps)
		code = &c
	}
	if err != nil {
		r.log.Warn("waiting for the step's process", "error", err.Error())
	}
	end, cut, _ := tailBytes(out, from, wire.MaxOutputBytes)
	res = result{exitCode: code, output: Text(end, wire.MaxOutputBytes, cut)}
	var why []string // said before the output's last lines
	var attrs []any
	if code != nil {
		attrs = []any{"exit_code", *code}
	}
	switch {
	case r.reason == stopStale:
		r.log.Warn("step killed: the lease is gone", attrs...)
		if r.upload != nil {
			r.upload.Abort()
			r.upload = nil
		}
		return result{none: true}
	case r.reason == stopGuard:
		r.log.Warn("step killed by the lease guard: dropped the work", attrs...)
		res.status, res.message = wire.ReportFailed, lostMessage
	case r.reason == stopCancel:
		r.log.Info("step cancelled", attrs...)
		res.status, why = wire.ReportCancelled, []string{"cancelled: the run was cancelled"}
	case r.reason == stopShutdown:
		r.log.Info("step cancelled: the agent is stopping", attrs...)
		res.status, why = wire.ReportCancelled, []string{"cancelled: the agent on node " + a.cfg.NodeID + " was stopped"}
	case timedOut:
		r.log.Info("step timed out", attrs...)
		res.status = wire.ReportFailed
		why = []string{fmt.Sprintf("timed out after %s (timeout_seconds): its process group was killed", seconds(spec.Timeout))}
	case code == nil || *code != 0:
		res.status = wire.ReportFailed
		var note string
		res.failure, note = ClassifyExit(code, spec.InfraExitCodes, r.fullDisk(dir))
		if note != "" {
			why = append(why, note)
		}
		r.log.Info("step failed", append(attrs, "failure", cmp.Or(res.failure, client.FailureTest))...)
	default:
		outs, err := readOutputs(outputsPath)
		if err != nil {
			r.log.Info("step failed: its outputs", "error", err.Error())
			res.status, why = wire.ReportFailed, []string{"MEDIATOR_OUTPUTS: " + err.Error()}
			break
		}
		r.log.Info("step succeeded", "outputs", len(outs))
		res.status, res.outputs = wire.ReportSucceeded, outs
	}
	if note := r.endLog(out.Name()); note != "" && res.message == "" {
		why = append(why, note)
	}
	if res.message == "" {
		res.message = Message(why, end, cut)
	}
	return res
}

// startLog begins uploading this try's log, from begin in out (its output from from), when the
// stack keeps logs.
func (r *runner) startLog(out *os.File, begin, from int64) {
	if r.logFirst == nil {
		return
	}
	acc := r.a.logs.get(r.logKey())
	r.upload = StartUpload(out, begin, from, r.logFirst, r.logURLs, acc, UploadOptions{Log: r.log})
}

// endLog waits (a bounded time) for the try's log to be stored, and says so for the message
// when it could not be: the node's copy at path is then the only whole one. Only the first
// call does anything.
func (r *runner) endLog(path string) string {
	up := r.upload
	if up == nil {
		return ""
	}
	r.upload = nil
	var why string
	if r.reason == stopShutdown {
		why = up.FinishWithin(shutdownLogWait)
	} else {
		why = up.Finish()
	}
	if why == "" {
		return ""
	}
	r.log.Warn("the step's log is not all stored", "why", why, "output", path)
	return IncompleteNote(why, path)
}

// logKey names the attempt whose log this try adds to.
func (r *runner) logKey() string {
	return fmt.Sprintf("%s/%s/%d", r.step.RunID, r.step.StepID, r.step.Attempt)
}

// logSummary is what the report says of the attempt's log: nil when the stack keeps none.
func (r *runner) logSummary() *client.LogSummary {
	if r.logFirst == nil {
		return nil
	}
	return r.a.logs.get(r.logKey()).Summary()
}

// firstLogURLs asks for the try's first batch when the started report's answer brought none
// but may have been a repeat's: an answer lost on the way and the report sent again is
// answered as the same report, perhaps without the batch. A stack that keeps no logs answers
// 404, and nothing is uploaded.
func (r *runner) firstLogURLs() *client.LogUpload {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := r.logURLs(ctx, 0, 16)
	if err != nil {
		if !client.HasCode(err, codeLogsNotStored) {
			r.log.Warn("no log upload URLs for this try: its log is kept on the node only", "error", err.Error())
		}
		return nil
	}
	return b
}

// logURLs is the production URLSource: the API's log-urls route, fenced by this step's lease.
func (r *runner) logURLs(ctx context.Context, from, count int) (*client.LogUpload, error) {
	return r.a.api.LogURLs(ctx, r.step.RunID, r.step.StepID, client.LogURLsRequest{
		NodeID: r.a.cfg.NodeID, BootID: r.a.boot, Epoch: r.epoch, From: from, Count: count,
	})
}

// watch waits for the step's leader to exit, stopping the group on a timeout or when told,
// and says whether the step timed out.
func (r *runner) watch(p *proc, spec Spec) (timedOut bool) {
	var timeout, escalate <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(time.Duration(spec.Timeout * float64(time.Second)))
		defer t.Stop()
		timeout = t.C
	}
	termed := false
	term := func() {
		if !termed {
			termed = true
			p.signal(syscall.SIGTERM)
			escalate = time.After(r.a.cfg.CancelGrace)
		}
	}
	for {
		select {
		case <-p.exited:
			return timedOut
		case <-timeout:
			timedOut, timeout = true, nil
			r.log.Info("step past its timeout_seconds: SIGTERM to its process group", "timeout_seconds", spec.Timeout)
			term()
		case <-escalate:
			r.log.Info("the grace is over: SIGKILL to the step's process group", "pgid", p.pgid)
			p.signal(syscall.SIGKILL)
			escalate = nil
		case why := <-r.kills:
			r.take(why)
			switch r.reason {
			case stopCancel, stopShutdown:
				r.log.Info("stopping the step: SIGTERM to its process group", "why", r.reason.String(), "grace", r.a.cfg.CancelGrace.String())
				term()
			case stopGuard, stopStale:
				p.signal(syscall.SIGKILL)
			}
		}
	}
}

func seconds(s float64) string { return (time.Duration(s * float64(time.Second))).String() }

// exitCode is the process's exit status, or 128 + the signal that killed it, as a shell says.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// readOutputs reads a step's MEDIATOR_OUTPUTS, which the step may have replaced with anything:
// a FIFO, a device or a link fails the step rather than hold up its report.
func readOutputs(path string) (map[string]string, error) {
	data, err := readRegular(path, maxOutputsFile)
	if err != nil {
		return nil, fmt.Errorf("%v: outputs are read only from the regular file the agent made", err)
	}
	return ParseOutputs(data)
}

// deliver sends a step's last report. One the API refuses as malformed or too large is sent
// again as a plain failure saying so: a step must not stay RUNNING for a report's fault.
func (r *runner) deliver(res result) runnerDone {
	if res.none {
		return runnerDone{}
	}
	req := client.ReportRequest{Status: res.status, ExitCode: res.exitCode, Outputs: res.outputs, Log: r.logSummary()}
	if res.status == wire.ReportFailed && !r.a.oldAPI.Load() {
		req.Failure = res.failure
	}
	if res.message != "" {
		req.Message = &res.message
	}
	if res.output != "" {
		req.Output = &res.output
	}
	rep, sent, err := r.send(req, false)
	if err != nil && req.Failure != "" && client.NamesField(err, "failure") {
		// An API older than this agent: the failure is reported as a test failure.
		r.log.Warn("the API does not take a failure's kind; reporting the step failed without it", "failure", req.Failure)
		r.a.oldAPI.Store(true)
		req.Failure = ""
		rep, sent, err = r.send(req, false)
	}
	var ae *client.Error
	if err != nil && errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusRequestEntityTooLarge) {
		r.log.Error("the API refused the step's report; reporting it failed instead", "error", err.Error())
		msg := Text([]byte("the agent's report was refused: "+err.Error()), wire.MaxMessageBytes, false)
		rep, sent, err = r.send(client.ReportRequest{Status: wire.ReportFailed, ExitCode: res.exitCode, Message: &msg}, false)
	}
	if err != nil || wire.Final(rep.StepState) {
		r.a.logs.drop(r.logKey()) // a step retried keeps its attempt's log for the next try
	}
	if err != nil {
		return r.refused(err)
	}
	attrs := []any{"status", res.status, "step_state", rep.StepState, "run_state", rep.RunState}
	if req.Status == wire.ReportFailed {
		attrs = append(attrs, "failure", cmp.Or(req.Failure, client.FailureTest))
	}
	r.log.Info("step reported", attrs...)
	return runnerDone{reply: rep, sentAt: sent}
}

// refused says why a report was not accepted.
func (r *runner) refused(err error) runnerDone {
	switch {
	case errors.Is(err, errAbandoned):
		r.log.Info("report abandoned: the work was dropped", "why", r.reason.String())
	case client.HasCode(err, client.CodeStaleAssignment):
		r.log.Warn("the step is not this node's any more (409 stale_assignment): dropping the work")
		return runnerDone{stale: true}
	case client.HasCode(err, client.CodeNotRunnable), client.HasCode(err, client.CodeResultConflict):
		// The API moved on without this node's report (a cancel, a retry): nothing to mend.
		r.log.Warn("the report is not taken; the step is left as the API has it", "error", err.Error())
	default:
		r.log.Error("the report was refused", "error", err.Error())
	}
	return runnerDone{}
}

// send makes one report, trying again until the API answers it (credentials that could not be
// had, no connection, a 5xx: all pass) — or until the lease is known gone, or (starting) the
// step is stopped, or (stopping) shutdownReportFor has passed. It returns the answer with when
// the try it answers was sent: a lease the answer hands over is counted from then.
func (r *runner) send(req client.ReportRequest, starting bool) (*client.ReportReply, time.Time, error) {
	a := r.a
	req.NodeID, req.BootID, req.Epoch = a.cfg.NodeID, a.boot, r.epoch
	for n := 1; ; n++ {
		r.poll()
		switch {
		case r.reason == stopStale, starting && r.reason != stopNone,
			r.reason == stopShutdown && time.Since(r.stoppedAt) > shutdownReportFor:
			return nil, time.Time{}, errAbandoned
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sent := time.Now()
		rep, err := a.api.Report(ctx, r.step.RunID, r.step.StepID, req)
		cancel()
		if err == nil {
			r.sends = n
			return rep, sent, nil
		}
		if refused(err) {
			return nil, time.Time{}, err
		}
		wait := backoff(n, 10*time.Second)
		r.log.Warn("a report got no answer; trying again", "status", req.Status, "error", err.Error(),
			"tries", n, "retry_in", wait.Round(time.Millisecond).String())
		r.pause(wait)
	}
}

//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"mediator/shared/client"
	"mediator/shared/wire"
)

// Agent is one life of the agent process: one boot id.
type Agent struct {
	cfg     Config
	api     *client.Client
	log     *slog.Logger
	boot    string
	lock    *os.File // the work dir's, held for the life of the process
	groups  *groups
	cgroups *cgroups // nil: steps are tracked by their process groups and the subreaper alone
	out     *outputs
	push    *pusher // the connection hints come on (push_linux.go)
	steps   string  // the steps' own directories
	// kept holds the directories of failed steps whose run keeps its boards for a post-mortem
	// (keep_on_failure), each named <run>+<step>+<attempt>: kept while the node holds the run
	// or its debug hold, across a restart (a person rebooting the board), removed after.
	kept    string
	environ []string
	events  chan any
	logs    attemptLogs // the step logs of the attempts run here
	// oldAPI is set once the API refused a report's failure kind as a field it does not know:
	// reports go without one from then on.
	oldAPI atomic.Bool

	// The rest is the loop's alone.
	keptSaid map[string]string // kept directory → the debug hold whose log line named it
	labels   []string
	lease    *lease
	runners  map[string]*runner // by run/step
	done     map[string]uint64  // run/step → seq when its runner ended
	seq      uint64             // counts what a heartbeat answer may be older than
	interval time.Duration      // between heartbeats, as the API asks
	hb       heartbeats
	guard    *time.Timer
	stopping stopping
	// hardStop fires when a second signal's steps had their grace and a second more: the
	// agent exits then whatever is still being reported.
	hardStop <-chan time.Time
	drain    struct {
		heard bool   // a heartbeat that said draining was answered, or failed
		seen  bool   // the API says the node drains
		by    string // the admin who drained it, "" for the node itself
	}
	health selfCheck
	// healthCtx ends with the loop: a health command still running then is killed.
	healthCtx context.Context
	endHealth context.CancelFunc
	// noUnhealthy: the API refused a heartbeat's unhealthy as a field it does not know, and
	// heartbeats go without it (the node cannot quarantine itself there).
	noUnhealthy bool
	// seenHealth is the node's health as the API last showed it, for the log.
	seenHealth, seenHealthBy string
	exit                     int // <0 while running
}

// selfCheck is the loop's record of the agent's own checks of its machine: the work dir's room
// (a statfs, at every heartbeat and before every step) and the health command (in a goroutine
// of its own, never while a step runs).
type selfCheck struct {
	reason  string // what the heartbeats carry as unhealthy; "" while every check passes
	disk    string // the work dir's check
	cmd     string // the health command's last verdict
	running bool   // a run of the health command is under way
	last    time.Time
	timer   *time.Timer
	waiting bool // steps wait for the run under way
}

// stopping is how far the agent has gone in stopping: each SIGINT or SIGTERM takes it one state
// further, up to killing. The states are in order, and compared so (mayStart).
type stopping int

const (
	working    stopping = iota // no signal yet
	draining                   // the first signal: finish the lease's steps, take no more, exit
	cancelling                 // the second: cancel the steps running, report them, exit
	killing                    // the third, and any after: kill every step's process group, exit
)

// heartbeats is the loop's record of the heartbeat in flight and of those before.
type heartbeats struct {
	timer    *time.Timer
	inFlight bool
	again    bool // asked for while one was in flight
	failures int
	ok       bool // one was answered, ever
}

// lease is the lease the node holds, as the agent knows it.
type lease struct {
	runID   string
	epoch   int64
	expires time.Time // as the API wrote it, for the log
	// deadline is when the API may deem the lease expired, at the earliest, on this process's
	// monotonic clock (see deadline); guardAt is when the agent stops the lease's work if it
	// could not renew.
	deadline, guardAt time.Time
	adopted           uint64 // seq when it was taken
	suspended         bool   // the guard fired: nothing starts until a heartbeat renews it
}

// Messages to the loop.
type (
	heartbeatDone struct {
		reply     *client.HeartbeatReply
		err       error
		sent      uint64    // seq when it was sent
		start     time.Time // when it was sent
		drain     bool      // it said draining
		unhealthy bool      // it said unhealthy
	}
	healthDone struct {
		reason string
	}
	runnerDone struct {
		r      *runner
		reply  *client.ReportReply // the last report's answer; nil when none was accepted
		sentAt time.Time           // when the report it answers was sent
		stale  bool                // a report was answered 409 stale_assignment
	}
)

// Run runs the agent until it is drained or stopped, and returns the process's exit code.
func Run(cfg Config) int {
	// Taken from the first moment: a SIGTERM while the previous boot's steps are killed is a
	// drain all the same, and a SIGHUP then must not end the process.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	a, code := start(cfg)
	if a == nil {
		return code
	}
	return a.loop(sigs)
}

// start prepares the work dir, takes the boot id, and kills what a previous boot left
// running — all before the first heartbeat, which releases the previous boot's lease and may
// be answered with new work.
func start(cfg Config) (*Agent, int) {
	log := cfg.Log
	fail := func(msg string, err error) (*Agent, int) {
		log.Error(msg, "error", err.Error())
		return nil, ExitSetup
	}
	labels, err := readLabels(cfg)
	if err != nil {
		return fail("the labels", err)
	}
	dirs := map[string]string{}
	for _, d := range []string{"pgroups", "cgroups", "steps", "output", "kept"} {
		dirs[d] = filepath.Join(cfg.WorkDir, d)
		if err := os.MkdirAll(dirs[d], 0o750); err != nil {
			return fail("the work dir", err)
		}
	}
	lock, err := lockWorkDir(cfg.WorkDir)
	if err != nil {
		return fail("the work dir", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fail("a boot id", err)
	}
	a := &Agent{
		cfg: cfg, api: cfg.API, boot: id.String(), lock: lock, steps: dirs["steps"], kept: dirs["kept"], environ: os.Environ(),
		events: make(chan any, 16), labels: labels, keptSaid: map[string]string{}, runners: map[string]*runner{}, done: map[string]uint64{},
		exit: -1,
	}
	a.log = log.With("boot", a.boot)
	a.groups = newGroups(dirs["pgroups"], a.log)
	a.push = newPusher(cfg.NodeID, cfg.PushSigner, a.log)
	a.out = &outputs{dir: dirs["output"], keep: max(cfg.KeepOutputs, 1), keepBytes: cfg.KeepOutputBytes, busy: map[string]int{}}
	a.log.Info("agent starting", "node", cfg.NodeID, "labels", labels, "work_dir", cfg.WorkDir, "api", cfg.API.Base())
	if err := BecomeSubreaper(); err != nil {
		a.log.Warn("cannot become a child subreaper: orphans of a step are left to init", "error", err.Error())
	}
	g, n, err := KillLeftovers(cfg.WorkDir, a.log)
	if err != nil {
		return fail("what the previous boot left running", err)
	}
	if g > 0 {
		a.log.Info("killed what a previous boot left running", "groups", g, "processes", n)
	}
	if cfg.Cgroups != CgroupsOff {
		c, err := newCgroups(dirs["cgroups"], a.boot, a.log)
		switch {
		case err == nil:
			a.cgroups = c
			a.log.Info("steps are tracked by cgroup: nothing a step starts outlives its lease, even across a crash of the agent", "cgroup", c.boot)
		case cfg.Cgroups == CgroupsOn:
			return fail("--cgroups on: no cgroup the agent may divide", err)
		default:
			a.log.Warn("steps are tracked by process groups and a subreaper, not a cgroup: what a step moves out of its "+
				"process group (setsid, a daemon) outlives a crash of the agent", "why", err.Error())
		}
	}
	// The first heartbeat says already what the checks find: a machine that fails them takes
	// no lease.
	a.healthCtx, a.endHealth = context.WithCancel(context.Background())
	a.health.timer = time.NewTimer(time.Hour)
	a.health.timer.Stop()
	if cfg.HealthCmd != "" {
		a.health.last = time.Now()
		a.health.cmd = a.runHealthCmd()
		a.health.timer.Reset(cfg.HealthEvery)
	}
	a.updateHealth(false)
	// Nothing of a previous boot's steps is used again.
	if entries, err := os.ReadDir(a.steps); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(a.steps, e.Name()))
		}
	}
	return a, 0
}

func readLabels(cfg Config) ([]string, error) {
	var fromFile []string
	if cfg.LabelsFile != "" {
		var err error
		if fromFile, err = ReadLabelsFile(cfg.LabelsFile); err != nil {
			return nil, err
		}
	}
	return MergeLabels(cfg.Labels, fromFile)
}

// lockWorkDir keeps a second agent off this work dir: it would kill this one's steps as a
// previous boot's. The lock goes with the process, however it ends; the file must stay
// referenced until then, or its finalizer would close it and drop the lock.
func lockWorkDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another agent is using %s (%w)", dir, err)
	}
	return f, nil
}

func (a *Agent) loop(sigs <-chan os.Signal) int {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	go func() {
		for range chld {
			a.groups.reapOrphans()
		}
	}()
	a.hb.timer = time.NewTimer(0)
	a.guard = time.NewTimer(time.Hour)
	a.guard.Stop()
	for a.exit < 0 {
		select {
		case <-a.hb.timer.C:
			a.heartbeat()
		case <-a.guard.C:
			a.guardFired()
		case <-a.push.hints:
			// Only the timing changes: the heartbeat's answer says what there is to do. One in
			// flight is followed by one more (heartbeat), never by more than one.
			a.log.Debug("hint: heartbeating now")
			a.heartbeatNow()
		case <-a.health.timer.C:
			a.healthTick()
		case <-a.hardStop:
			a.log.Error("stopping now: the steps had their grace; killing what is left and exiting", "steps", len(a.runners))
			a.killAll()
			a.exit = ExitInterrupted
		case ev := <-a.events:
			switch ev := ev.(type) {
			case heartbeatDone:
				a.heartbeatDone(ev)
			case runnerDone:
				a.runnerDone(ev)
			case healthDone:
				a.healthDone(ev)
			}
		case s := <-sigs:
			a.signal(s)
		}
		a.checkExit()
	}
	a.endHealth()
	a.push.close()
	if a.cgroups != nil {
		a.cgroups.release()
	}
	a.log.Info("agent exiting", "code", a.exit)
	return a.exit
}

// hardStopAfterGrace is how long after a second signal's grace the agent exits whatever is
// left: within the grace and a second, the killing included.
const hardStopAfterGrace = 750 * time.Millisecond

// killAll kills every step's process group, and what they left outside them (with a cgroup,
// everything of every lease), at once: the agent is about to exit, and nothing it started may
// outlive it.
func (a *Agent) killAll() {
	a.groups.killAll()
	a.groups.killStrays()
	if a.cgroups != nil {
		a.cgroups.killLeases(-1)
	}
}

// HeartbeatTimeout bounds one heartbeat call, its client's own retries included, so that a
// hung call does not hold up the next: the cadence, within 5 to 10 s. The guard's safety does
// not depend on it (the lease is counted from when the call was sent); its liveness does (see
// checkRenewals).
func HeartbeatTimeout(interval time.Duration) time.Duration {
	if interval <= 0 {
		return 10 * time.Second
	}
	return min(max(interval, 5*time.Second), 10*time.Second)
}

// guardMargin is how long before the lease's deadline the guard kills its work: max(2 s,
// TTL/10), for the kill itself and for what the machine's scheduling delays it by.
func guardMargin(ttl time.Duration) time.Duration { return max(2*time.Second, ttl/10) }

// RenewalRoom is how long a heartbeat sent on time, one interval after the last renewal was
// sent, has to be answered before the guard fires: TTL less Date's second, the margin and the
// interval.
func RenewalRoom(ttl, interval time.Duration) time.Duration {
	return ttl - time.Second - guardMargin(ttl) - interval
}

// checkRenewals says, once the agent learns the TTL, whether a slow but healthy network keeps
// the lease: a heartbeat that times out must leave room for one more try before the guard.
func (a *Agent) checkRenewals() {
	ttl := 3 * a.interval
	room, timeout := RenewalRoom(ttl, a.interval), HeartbeatTimeout(a.interval)
	attrs := []any{"ttl", ttl.String(), "every", a.interval.String(), "guard_margin", guardMargin(ttl).String(),
		"request_timeout", timeout.String(), "room", room.String()}
	if room < 2*timeout {
		a.log.Warn("renewals are marginal at these settings: a heartbeat that times out leaves no room for another "+
			"before the guard drops the lease's work; raise LEASE_TTL_SECONDS", attrs...)
		return
	}
	a.log.Debug("renewals have room for a retry", attrs...)
}

// heartbeat sends one, unless one is in flight: then another follows it at once.
func (a *Agent) heartbeat() {
	if a.hb.inFlight {
		a.hb.again = true
		return
	}
	a.hb.inFlight = true
	a.updateHealth(false)
	req := client.HeartbeatRequest{BootID: a.boot, Labels: a.labels, Draining: a.stopping != working}
	if !a.noUnhealthy {
		req.Unhealthy = a.health.reason
	}
	sent, timeout := a.seq, HeartbeatTimeout(a.interval)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		rep, err := a.api.Heartbeat(ctx, a.cfg.NodeID, req)
		a.events <- heartbeatDone{reply: rep, err: err, sent: sent, start: start, drain: req.Draining, unhealthy: req.Unhealthy != ""}
	}()
}

func (a *Agent) heartbeatNow() { a.hb.timer.Reset(0) }

func (a *Agent) heartbeatDone(d heartbeatDone) {
	a.hb.inFlight = false
	if d.drain {
		a.drain.heard = true
	}
	if d.err != nil && d.unhealthy && client.NamesField(d.err, "unhealthy") {
		// An API older than this agent: it goes on heartbeating, unable to quarantine itself;
		// the steps it is given while unhealthy are still refused, as the machine's failures.
		a.log.Error("the API does not take a node's unhealthy reason: heartbeating without it; the node is not quarantined", "reason", a.health.reason)
		a.noUnhealthy = true
		a.hb.timer.Reset(0)
		return
	}
	if d.err != nil {
		a.hb.failures++
		if !a.hb.ok && refused(d.err) {
			a.log.Error("the API refuses this node's heartbeat", "error", d.err.Error())
			a.exit = ExitSetup
			return
		}
		wait := backoff(a.hb.failures, max(a.interval, time.Second))
		a.log.Warn("heartbeat failed", "error", d.err.Error(), "failures", a.hb.failures, "retry_in", wait.Round(time.Millisecond).String())
		a.hb.again = false
		a.hb.timer.Reset(wait)
		return
	}
	if a.hb.failures > 0 {
		a.log.Info("heartbeat answered again", "after_failures", a.hb.failures)
		a.hb.failures = 0
	}
	hb := d.reply
	a.interval = time.Duration(max(hb.NextHeartbeatSeconds, 1)) * time.Second
	if !a.hb.ok {
		a.hb.ok = true
		a.log.Info("heartbeating", "node", a.cfg.NodeID, "every", a.interval.String())
		a.checkRenewals()
	}
	a.log.Debug("heartbeat answered", "lease", hb.Lease, "steps", len(hb.Steps), "draining", hb.Node.Draining)
	a.noteDrain(hb.Node)
	a.noteHealth(hb.Node)
	a.push.offer(hb.Push)
	a.tidyKept(hb.Lease)
	a.reconcile(d)
	next := a.interval - time.Since(d.start)
	if a.hb.again {
		next, a.hb.again = 0, false
	}
	a.hb.timer.Reset(max(next, 0))
}

// refused: an answer no retry changes (bad labels, no credentials, not this node's).
func refused(err error) bool {
	var ae *client.Error
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests &&
		ae.Status != http.StatusRequestTimeout
}

// backoff is the wait before try n+1: exponential, with jitter, never less than a quarter
// second nor more than ceiling, so that the loop never spins.
func backoff(n int, ceiling time.Duration) time.Duration {
	d := min((500*time.Millisecond)<<min(n-1, 10), ceiling)
	d = max(d, 500*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

func (a *Agent) noteDrain(n client.NodeInfo) {
	by := ""
	if n.DrainRequestedBy != nil {
		by = *n.DrainRequestedBy
	}
	switch {
	case n.Draining && (!a.drain.seen || by != a.drain.by):
		who := by
		if who == "" {
			who = "agent"
		}
		a.log.Info("drain in effect: the node takes no new work", "by", who)
	case !n.Draining && a.drain.seen:
		a.log.Info("drain lifted: the node takes work again")
	}
	a.drain.seen, a.drain.by = n.Draining, by
}

// reconcile takes what a heartbeat says of the lease. An answer may be older than what the
// loop learnt since it was sent (a report's answer handing over the next run): epochs only
// grow, and a lease taken after the heartbeat was sent is not judged by it.
func (a *Agent) reconcile(d heartbeatDone) {
	hb, cur := d.reply, a.lease
	switch hl := hb.Lease; {
	case hl == nil:
		if cur != nil && cur.adopted <= d.sent {
			a.endLease("the heartbeat shows no lease")
		}
		return
	case cur != nil && hl.Epoch < cur.epoch:
		return
	case cur != nil && hl.Epoch == cur.epoch:
		a.renew(hl.ExpiresAt, hb.Header, d.start)
	default:
		if cur != nil {
			a.endLease(fmt.Sprintf("the heartbeat shows run %s under epoch %d", hl.RunID, hl.Epoch))
		}
		a.adopt(*hl, hb.Header, d.start, "heartbeat")
	}
	a.consider(hb.Steps, &d.sent)
}

// deadline is when the lease expires at the earliest, on the monotonic clock: what the answer
// says was left of it (expires_at less its Date, less a second because Date is in whole
// seconds), counted from when the request was sent. The server wrote the lease after the
// request left and wrote the answer after that, so any time spent in transit, either way,
// shortens what the agent believes it has and never lengthens it: the guard errs early, never
// late, whatever the network or a timeout does. Only the two clocks' rates are trusted, not
// their agreement.
func deadline(expires time.Time, h http.Header, sent time.Time) time.Time {
	left := time.Until(expires) // without a Date, the wall clock is all there is
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		left = expires.Sub(date)
	}
	return sent.Add(left - time.Second)
}

// margin is how long before the deadline the guard kills the lease's work.
func (a *Agent) margin(l *lease) time.Duration {
	ttl := 3 * a.interval
	if a.interval == 0 {
		ttl = time.Until(l.deadline)
	}
	return guardMargin(ttl)
}

// adopt takes a lease handed over by a heartbeat's answer or a report's (via), whose request
// was sent at sent.
func (a *Agent) adopt(hl client.HeldLease, h http.Header, sent time.Time, via string) {
	a.seq++
	l := &lease{runID: hl.RunID, epoch: hl.Epoch, expires: hl.ExpiresAt, adopted: a.seq}
	l.deadline = deadline(hl.ExpiresAt, h, sent)
	l.guardAt = l.deadline.Add(-a.margin(l))
	a.lease = l
	clear(a.done)
	a.logs.keepRun(l.runID)
	a.killStrays("before the lease's work starts")
	a.log.Info("lease taken", "run", l.runID, "epoch", l.epoch, "via", via, "expires_at", l.expires,
		"guard_in", time.Until(l.guardAt).Round(time.Millisecond).String())
	a.armGuard()
}

func (a *Agent) renew(expires time.Time, h http.Header, sent time.Time) {
	l := a.lease
	if d := deadline(expires, h, sent); d.After(l.deadline) {
		l.deadline, l.expires = d, expires
		l.guardAt = d.Add(-a.margin(l))
		if l.suspended && time.Now().Before(l.guardAt) {
			l.suspended = false
			a.log.Info("the lease is renewed again; its work goes on", "run", l.runID, "epoch", l.epoch, "expires_at", expires)
		}
	}
	a.armGuard()
}

func (a *Agent) armGuard() {
	if a.lease == nil || a.lease.suspended {
		a.guard.Stop()
		return
	}
	a.guard.Reset(max(time.Until(a.lease.guardAt), 0))
}

// guardFired: the lease could not be renewed in time. Its steps' processes are killed now,
// before the API may give the node to another run; their reports follow whenever the API
// answers again (failed, lease_lost), and nothing of the lease starts until a heartbeat
// renews it.
func (a *Agent) guardFired() {
	l := a.lease
	if l == nil || l.suspended {
		return
	}
	if time.Now().Before(l.guardAt) {
		a.armGuard()
		return
	}
	l.suspended = true
	n := 0
	for _, r := range a.runners {
		if r.epoch == l.epoch && r.stop(stopGuard) {
			n++
		}
	}
	a.log.Warn("lease guard: the lease was not renewed in time; dropping its work", "run", l.runID, "epoch", l.epoch,
		"expires_at", l.expires, "left", time.Until(l.deadline).Round(time.Millisecond).String(), "steps", n)
	a.killStrays("the lease guard")
}

// killStrays kills what the lease's steps left outside their process groups, at the moments
// nothing of a lease may run on: the lease gone or suspended by the guard, or another about to
// start. With a cgroup, that is everything in the cgroup of every lease but the one held.
func (a *Agent) killStrays(when string) {
	n := a.groups.killStrays()
	if a.cgroups != nil {
		keep := int64(-1)
		if a.lease != nil && !a.lease.suspended {
			keep = a.lease.epoch
		}
		n += a.cgroups.killLeases(keep)
	}
	if n > 0 {
		a.log.Warn("killed what steps left running outside their process groups", "processes", n, "when", when)
	}
}

// endLease forgets the lease, killing at once whatever of it still runs: the node may be
// another run's already.
func (a *Agent) endLease(why string) {
	l := a.lease
	a.lease = nil
	a.guard.Stop()
	clear(a.done)
	n := 0
	for _, r := range a.runners {
		if r.epoch == l.epoch && r.stop(stopStale) {
			n++
		}
	}
	if n > 0 {
		a.log.Warn("the lease is gone: killing its work at once", "run", l.runID, "epoch", l.epoch, "why", why, "steps", n)
		return // its strays go once its steps have (runnerDone)
	}
	a.log.Info("lease ended", "run", l.runID, "epoch", l.epoch, "why", why)
	if len(a.runners) == 0 {
		a.killStrays("the lease ended")
	}
}

// mayStart: a step of the lease may start now.
func (a *Agent) mayStart() bool {
	return a.lease != nil && !a.lease.suspended && time.Now().Before(a.lease.guardAt) && a.stopping < cancelling
}

// consider acts on the steps the lease gives, from a heartbeat (sent is when it was sent) or
// from a report's answer (sent nil: only steps made runnable).
func (a *Agent) consider(steps []client.NodeStep, sent *uint64) {
	for _, st := range steps {
		if a.lease == nil || st.RunID != a.lease.runID {
			continue
		}
		key := st.RunID + "/" + st.StepID
		if r := a.runners[key]; r != nil {
			if st.Cancel {
				r.stop(stopCancel)
			}
			continue
		}
		if sent != nil && a.done[key] > *sent {
			continue // the heartbeat predates this node's last report on the step
		}
		switch {
		case st.Cancel && (st.State == wire.Running || st.State == wire.Pending):
			a.run(st, reportCancelled)
		case st.State == wire.Running && sent != nil:
			// RUNNING, and nobody here runs it: its process was dropped (the guard, or a
			// report whose answer was lost). Say so, rather than leave it RUNNING.
			a.run(st, reportLost)
		case st.State == wire.Pending && st.Runnable && a.mayStart():
			if a.healthFirst() {
				continue // the health command runs first; its end heartbeats, which lists the step again
			}
			a.run(st, runStep)
		}
	}
}

func (a *Agent) run(st client.NodeStep, mode runMode) {
	r := &runner{a: a, step: st, key: st.RunID + "/" + st.StepID, epoch: a.lease.epoch, mode: mode,
		kills: make(chan stopReason, 4), unhealthy: a.health.reason}
	r.log = a.log.With("run", st.RunID, "step", st.StepID, "attempt", st.Attempt)
	a.runners[r.key] = r
	go r.run()
}

func (a *Agent) runnerDone(d runnerDone) {
	if a.runners[d.r.key] == d.r {
		delete(a.runners, d.r.key)
	}
	a.seq++
	if a.lease != nil && a.lease.epoch == d.r.epoch {
		a.done[d.r.key] = a.seq
	}
	if d.stale && a.lease != nil && a.lease.epoch == d.r.epoch {
		a.endLease("a report was answered 409 stale_assignment")
	}
	if rep := d.reply; rep != nil {
		switch {
		case rep.NextRun != nil:
			nl := rep.NextRun.Lease
			if a.lease == nil || nl.Epoch > a.lease.epoch {
				if a.lease != nil {
					a.endLease(fmt.Sprintf("the node was handed run %s", nl.RunID))
				}
				a.adopt(nl, rep.Header, d.sentAt, "report")
			}
			if a.lease != nil && a.lease.epoch == nl.Epoch {
				a.consider(rep.NextRun.Steps, nil)
			}
		case a.lease == nil || a.lease.epoch != d.r.epoch:
			// About a lease no longer held: nothing in it to act on.
		case wire.Final(rep.RunState):
			a.endLease("the run ended " + rep.RunState)
		default:
			a.consider(rep.Next, nil)
		}
	}
	if len(a.runners) == 0 && a.lease == nil {
		a.killStrays("the lease ended")
		a.updateHealth(true) // a step may have filled the disk: say so before the next lease
		if a.healthDue() {
			a.startHealthCmd() // before the next lease, not in the midst of one
		}
	}
	if a.stopping == draining && len(a.runners) == 0 {
		a.heartbeatNow() // is the lease released? Then the drain is over.
	}
}

func (a *Agent) signal(s os.Signal) {
	if s == syscall.SIGHUP {
		a.reloadLabels()
		return
	}
	if a.stopping < killing {
		a.stopping++
	}
	switch a.stopping {
	case draining:
		a.log.Info("draining: finishing the steps of the lease held, then exiting; a second signal cancels them", "signal", s.String())
		a.drain.heard = false
		a.heartbeatNow()
	case cancelling:
		a.log.Warn("stopping: cancelling the steps running; a third signal kills them at once", "signal", s.String(),
			"steps", len(a.runners), "exit_within", (a.cfg.CancelGrace + time.Second).String())
		for _, r := range a.runners {
			r.stop(stopShutdown)
		}
		// Reports that cannot be delivered, or a step that ignores its signals, must not keep
		// a stopped agent: its next boot settles what it could not report.
		a.hardStop = time.After(a.cfg.CancelGrace + hardStopAfterGrace)
	case killing:
		a.log.Error("stopping at once: killing every step's process group", "signal", s.String())
		a.killAll()
		a.exit = ExitInterrupted
	}
}

func (a *Agent) reloadLabels() {
	if a.cfg.LabelsFile == "" {
		a.log.Info("SIGHUP: no labels file to read again")
		return
	}
	labels, err := readLabels(a.cfg)
	switch {
	case err != nil:
		a.log.Error("SIGHUP: the labels file is not usable; the labels advertised stay", "error", err.Error(), "labels", a.labels)
	case slices.Equal(labels, a.labels):
		a.log.Info("SIGHUP: the labels are unchanged", "labels", labels)
	default:
		a.labels = labels
		a.log.Info("labels reloaded", "labels", labels)
		a.heartbeatNow()
	}
}

// checkExit ends a drain once nothing of a lease is left: no step running or reporting, and
// no lease, as a heartbeat that said draining found — or none to be had from the API and the
// lease known surely expired.
func (a *Agent) checkExit() {
	if a.exit >= 0 || len(a.runners) > 0 {
		return
	}
	switch a.stopping {
	case draining:
		held := a.lease != nil && (a.hb.failures == 0 || time.Now().Before(a.lease.deadline))
		if a.drain.heard && !held {
			a.exit = ExitOK
		}
	case cancelling:
		a.exit = ExitInterrupted
	}
}

// tidyKept removes the kept step directories of runs the node no longer holds — neither the
// run itself nor its debug hold — and says where the kept ones are once a debug hold holds them.
func (a *Agent) tidyKept(l *client.HeldLease) {
	entries, err := os.ReadDir(a.kept)
	if err != nil {
		return
	}
	for _, e := range entries {
		run, _, _ := strings.Cut(e.Name(), "+")
		dir := filepath.Join(a.kept, e.Name())
		switch {
		case l != nil && l.DebugOf != nil && *l.DebugOf == run:
			if a.keptSaid[dir] != l.RunID {
				a.log.Info("the failed step's directory is kept for the debug hold", "dir", dir, "hold", l.RunID, "run", run)
				a.keptSaid[dir] = l.RunID
			}
		case l != nil && l.RunID == run:
			// The run still holds the node: its settle passes it to the hold.
		default:
			if err := os.RemoveAll(dir); err == nil {
				a.log.Info("a kept step directory removed: its debug hold ended", "dir", dir)
			}
			delete(a.keptSaid, dir)
		}
	}
}

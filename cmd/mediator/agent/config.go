// Package agent is the node side of Mediator, `mediator agent`: it heartbeats for its node,
// runs the steps of the lease the node holds as local processes, reports them, and holds the
// lease as a guard — no step of a lease outlives the lease, even when the agent is cut off
// from the API.
//
// One goroutine, the loop, owns the agent's state: the lease, the steps being run, the drain.
// Everything that waits — a heartbeat, a step's process, a report and its retries — runs in
// a goroutine of its own and tells the loop by a message, so the loop never blocks and its
// guard timer fires on time whatever the network does. A step's goroutine (a runner) is told
// to stop by the loop, for a reason that decides how it stops and what it reports.
package agent

import (
	"log/slog"
	"time"

	"mediator/shared/client"
)

// Config is how an agent is started.
type Config struct {
	NodeID     string
	Labels     []string // given on the command line
	LabelsFile string   // re-read on SIGHUP; "" for none
	WorkDir    string
	// CancelGrace is how long a cancelled step has between SIGTERM and SIGKILL.
	CancelGrace time.Duration
	// KeepOutputs is how many step output files are kept under the work dir.
	KeepOutputs int
	// KeepOutputBytes bounds the total size of the step output files kept; 0 is no bound.
	KeepOutputBytes int64
	// Cgroups is how steps are tracked: CgroupsAuto, CgroupsOn or CgroupsOff.
	Cgroups string
	// HealthCmd, when set, is the machine's own health check, run by /bin/sh -c every
	// HealthEvery while no step runs, and before a step when the last run is older than that:
	// while it fails, the node quarantines itself with the last line of its output as the
	// reason.
	HealthCmd   string
	HealthEvery time.Duration
	// MinFree is the least room the work dir's filesystem may have before the node
	// quarantines itself.
	MinFree MinFree
	API     *client.Client
	// PushSigner, when the API is IAM's, signs the push connection (a wss:// broker, IoT
	// Core) with the node's own credentials, as its heartbeats are.
	PushSigner *client.SigV4
	Log        *slog.Logger
}

// Cgroup modes (Config.Cgroups), here rather than beside the cgroup code, which is Linux's
// alone: the command line that takes them builds on every platform.
const (
	CgroupsAuto = "auto" // use a cgroup when the agent's own allows it, else process groups
	CgroupsOn   = "on"   // refuse to start without one
	CgroupsOff  = "off"  // process groups and the subreaper alone
)

// Exit codes of Run.
const (
	ExitOK          = 0   // drained: every step of the lease held finished and was reported
	ExitSetup       = 3   // the agent could not start: the work dir, the labels, a refused heartbeat
	ExitInterrupted = 130 // stopped by a second or third signal: its steps were cancelled
)

package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"mediator/cmd/mediator/agent"
	"mediator/shared/client"
	"mediator/shared/wire"
)

func agentCommand(a *app) *cobra.Command {
	var (
		cfg                      agent.Config
		logFormat, logLevel      string
		minFree, keepOutputBytes string
	)
	cmd := &cobra.Command{
		Use:     "agent [--node-id ID] [--labels k=v,k2] [--labels-file F] [--work-dir D]",
		Short:   "Run this machine as a node: heartbeat, run the steps of its lease, report them",
		GroupID: "node",
		Long: `mediator agent makes this machine a Mediator node. It heartbeats as --node-id (the host
name by default) with its labels (--labels, repeatable, and --labels-file, one label per line,
# for comments, read again on SIGHUP), and runs the steps of the lease its node holds: every
runnable step of its role, several at once when several are runnable, each in a process group
of its own, in a fresh directory under --work-dir. It reports each started, then succeeded,
failed (with the exit code; 128 + the signal for a killed process) or cancelled, with the last
lines of its combined output as the message (whole lines, at most 4 KiB: the error a script
printed last is what the run shows) and the last 64 KiB as the output. Every step's whole
output stays under --work-dir/output, one file per run, step and attempt: the newest kept, at
most --keep-outputs files and --keep-output-bytes in all, the oldest removed first.

In a stack that keeps logs, the agent also streams each step's output, as it runs, to S3
through the presigned URLs the API gives the node holding the step's lease: numbered chunks,
the first output within about a second, then what is new every LOG_FLUSH_SECONDS, everything
at the step's end (which waits at most 30 s for it). Past LOG_MAX_BYTES_PER_STEP of one try it
keeps only a rolling tail, and stores the try's beginning, a line saying how much was left
out, and its last LOG_TAIL_BYTES. An upload that fails is tried again and never holds up or
fails the step; the report says what was stored (size and SHA-256), and, when not all of it
was, its message says so and where the whole log is on the node. mediator logs reads them.

A step's spec, as the agent reads it:
  {"cmd": "make test"}                   run by /bin/sh -c
  {"argv": ["make", "test"]}             run as given, argv[0] found in the step's PATH
  "env": {"NAME": "value"}               added to its environment
  "workdir": "/srv/board"                an existing directory to run in instead of a fresh one
  "timeout_seconds": 600                 killed past it (SIGTERM, SIGKILL after --cancel-grace)
  "infra_exit_codes": [75]               exit codes by which its scripts say the machine, not
                                         the test, failed (1 to 255, at most 32)
Any other field, or neither cmd nor argv, fails the step saying why.

A failed step is reported as the machine's failure ("infra"), which counts against the node's
health — a node with NODE_QUARANTINE_AFTER of them in a row is quarantined — when the machine
could not run it: its program (argv[0]) or its workdir does not exist on this node; its
directory, output file, process group or cgroup could not be made, or its process could not
be spawned (a full disk, no memory); it failed while the filesystem of the work dir, or of its
workdir, had less room than --min-free asks; it exited with one of its infra_exit_codes; or
the node's own checks (below) failed when it was to start, and it was not run. Every other
failure is the test's and never counts: a spec the agent cannot read (the submitter's
mistake), a timeout, a bad MEDIATOR_OUTPUTS, any other exit, and a step the lease guard
dropped (lease_lost: the agent cannot tell its own network from an outage of the API, and the
API counts a lease that was lost itself). A cmd runs through /bin/sh: a command missing there
is the shell's exit 127, which counts against the machine only when infra_exit_codes lists
127.

A step's environment is the agent's, without its MEDIATOR_ variables, then the spec's env, then:
  MEDIATOR_RUN_ID, MEDIATOR_STEP_ID, MEDIATOR_ROLE, MEDIATOR_NODE_ID, MEDIATOR_ATTEMPT
                                MEDIATOR_RUN_ID is the run's key, unique across owners: its
                                id, unless another owner's run had that key first
  MEDIATOR_NODE_<ROLE>          the node of every role of the run
  MEDIATOR_OUTPUTS              a file to append key=value lines to: after a successful exit
                                they are the step's outputs (a line that is not one fails it)
  MEDIATOR_INPUTS               a JSON file, {"<step>": {"key": "value"}}: the outputs of the
                                steps it runs after
  MEDIATOR_INPUT_<STEP>_<KEY>   each of those
Names are upper-cased, every character but A-Z and 0-9 made "_"; two names that would meet in
one variable (roles "dut" and "DUT", outputs "a-b" and "a_b") fail the step before it starts.
MEDIATOR_OUTPUTS is read only as the regular file the agent made: a FIFO, device or link there
fails the step.

The agent checks its own machine, and quarantines its node itself while a check fails: its
heartbeats say unhealthy, with the reason, and the node takes no new lease; once every check
passes again, its heartbeat lifts that quarantine (never an admin's or the system's). The
checks:
  room under --work-dir   free space below --min-free — by default 1 GiB or 5 % of the
                          filesystem, whichever is smaller — or free inodes below 65,536 or
                          5 % of them, whichever is smaller; --min-free 10% makes 10 % the one
                          limit for both, --min-free 2GiB the space's, 0 turns it off. Looked at
                          with every heartbeat and before every step.
  --health-cmd CMD        run by /bin/sh -c in the work dir (MEDIATOR_NODE_ID and
                          MEDIATOR_WORK_DIR set): at the start, before the first heartbeat;
                          every --health-every while no step runs; and before a step when its
                          last run is older than that (the node idle, or busy, that long), the
                          step waiting for it. It fails by exiting non-zero, or by running past
                          --health-every (within 5 s to 1 min); the reason is the last line of
                          its output (printable, at most 512 bytes).
A step that was to start while a check fails is not run: it is reported failed, infra, saying
why.

The lease is the guard: if the agent cannot renew it in time (the API unreachable, or
answering 503), it kills its steps' processes max(2 s, TTL/10) before the lease may expire —
counted from when the renewing request was sent, so a slow network makes it early, never late
— so that the node never runs two runs at once, and reports them failed (lease_lost) if the
lease comes back. A heartbeat that shows the lease gone, or a report answered 409, kills its
work at once. What a step leaves running in its process group is killed when it ends, and what
left the group (setsid, a daemon) when the lease ends.

Steps are tracked by cgroup v2 where the agent's own cgroup lets it make children (systemd's
Delegate=yes, as the unit in infra/ sets; --cgroups): each step is spawned into a cgroup of its
lease, which nothing can leave, so a new start kills whatever a crashed one left, daemons
included, before it heartbeats. Without one, process groups are recorded under --work-dir and
killed at the next start, and a child subreaper catches what leaves them while the agent lives;
what left its process group outlives a crash of the agent.

The first SIGTERM or SIGINT drains: no new work, the lease held finished and reported, exit 0.
A second cancels the steps running (SIGTERM, SIGKILL after --cancel-grace, reported cancelled)
and exits 130 within --cancel-grace and a second, reported or not; a third kills them at once. An admin's drain (mediator drain) stops new work
without stopping the agent.

When the heartbeat's answer offers push (the stack's MQTT broker, AWS IoT Core as deployed,
and the node's own topic), the agent keeps a connection to it — over WebSocket signed with
the node's own AWS credentials, as its heartbeats are — and heartbeats at once on any message
there: a run placed on the node starts, and a cancel stops its step, within about a second
instead of at the next heartbeat. A message says only "look now"; the heartbeat's answer
stays the truth. Without the connection (refused, lost, not offered) the agent heartbeats at
its cadence as it always does, and connects again with backoff (at most 30 s apart).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := agentLog(a, logFormat, logLevel)
			if err != nil {
				return err
			}
			if cfg.NodeID == "" {
				host, err := os.Hostname()
				if err != nil {
					return usagef("--node-id: the host name: %v", err)
				}
				cfg.NodeID = host
			}
			if !wire.IDPattern.MatchString(cfg.NodeID) {
				return usagef("--node-id %q is not an id (%s)", cfg.NodeID, wire.IDPattern)
			}
			if cfg.CancelGrace <= 0 {
				return usagef("--cancel-grace must be positive")
			}
			if cfg.KeepOutputs < 1 {
				return usagef("--keep-outputs must be at least 1")
			}
			n, err := agent.ParseSize(keepOutputBytes)
			if err != nil {
				return usagef("--keep-output-bytes: %v", err)
			}
			cfg.KeepOutputBytes = int64(n)
			if cfg.MinFree = agent.DefaultMinFree; minFree != "" {
				if cfg.MinFree, err = agent.ParseMinFree(minFree); err != nil {
					return usagef("--min-free: %v", err)
				}
			}
			if cfg.HealthEvery <= 0 {
				return usagef("--health-every must be positive")
			}
			switch cfg.Cgroups {
			case agent.CgroupsAuto, agent.CgroupsOn, agent.CgroupsOff:
			default:
				return usagef("--cgroups must be auto, on or off, not %q", cfg.Cgroups)
			}
			if cfg.WorkDir == "" {
				if cfg.WorkDir, err = defaultWorkDir(); err != nil {
					return usagef("--work-dir: %v", err)
				}
			}
			if cfg.WorkDir, err = filepath.Abs(cfg.WorkDir); err != nil {
				return usagef("--work-dir: %v", err)
			}
			// Short calls, few retries: the agent's own loop tries again, and its guard must
			// not wait behind a call.
			cfg.API, err = a.newClient(cmd.Context(),
				client.WithUserAgent("mediator-agent/"+version()+" ("+cfg.NodeID+")"),
				client.WithRetry(client.Retry{Attempts: 3, Budget: 20 * time.Second}),
				client.WithTimeout(10*time.Second))
			if err != nil {
				return err
			}
			cfg.Log = log
			if s, ok := cfg.API.Auth().(*client.SigV4); ok {
				cfg.PushSigner = s
			}
			if code := agent.Run(cfg); code != 0 {
				return exitWith(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", "", "this node's id (default: the host name)")
	f.StringSliceVar(&cfg.Labels, "labels", nil, "labels to advertise, key=value or key, comma-separated; repeatable")
	f.StringVar(&cfg.LabelsFile, "labels-file", "", "a file of labels, one per line (# comments), read again on SIGHUP")
	f.StringVar(&cfg.WorkDir, "work-dir", "", "where steps run and their output stays (default: /var/lib/mediator as root, else ~/.local/state/mediator)")
	f.DurationVar(&cfg.CancelGrace, "cancel-grace", 10*time.Second, "between SIGTERM and SIGKILL for a cancelled or timed-out step")
	f.IntVar(&cfg.KeepOutputs, "keep-outputs", 500, "how many step output files to keep")
	f.StringVar(&keepOutputBytes, "keep-output-bytes", "2GiB", "how many bytes of step output files to keep in all, the oldest removed first (0: no bound)")
	f.StringVar(&minFree, "min-free", "", "the least room under --work-dir before the node quarantines itself: SIZE, PCT% or 0 for no check (default: 1GiB or 5%, whichever is smaller)")
	f.StringVar(&cfg.HealthCmd, "health-cmd", "", "a command checking this machine (sh -c): while it fails, the node quarantines itself")
	f.DurationVar(&cfg.HealthEvery, "health-every", 5*time.Minute, "how often --health-cmd runs while the node is idle, and how old its last run may be when a step starts")
	f.StringVar(&cfg.Cgroups, "cgroups", agent.CgroupsAuto, "track steps by cgroup v2: auto (when the agent's own cgroup allows it), on (refuse to start without), off")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

func agentLog(a *app, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level must be debug, info, warn or error, not %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usagef("--log-format must be text or json, not %q", format)
}

func defaultWorkDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/mediator", nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mediator"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to default to: %w", err)
	}
	return filepath.Join(home, ".local", "state", "mediator"), nil
}

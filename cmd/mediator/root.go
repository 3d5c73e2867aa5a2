package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mediator/shared/client"
)

// Exit codes: what a script can tell apart without reading the output.
const (
	exitOK          = 0   // the run SUCCEEDED; or accepted (without --wait); a dry run placeable or busy
	exitFailed      = 1   // the run FAILED (a 422 too); a dry run impossible or too_wide
	exitCancelled   = 2   // the run was CANCELLED
	exitUsage       = 3   // a usage error, or a 4xx answer other than 422
	exitUnavailable = 4   // the API could not be reached, or answered 5xx after the retries
	exitInterrupted = 130 // interrupted (a run being followed goes on)
)

const exitCodesHelp = `Exit codes:
  0    the run SUCCEEDED; or, without --wait, it was accepted; a dry run is placeable or busy
  1    the run FAILED (a 422 refusal included); a dry run is impossible or too_wide
  2    the run was CANCELLED
  3    a usage error, or an answer 4xx other than 422 (400 invalid, 401, 403, 404, 409, ...)
  4    the API is unavailable: no connection, or 5xx (or 429) after the retries
  130  interrupted (a run being followed goes on)`

// environment is what the process gets from outside: streams, variables, and whether the
// streams are terminals. Tests of the command tree give their own.
type environment struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdoutTTY      bool
	stderrTTY      bool
	now            func() time.Time
}

func system() environment {
	return environment{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stdoutTTY: terminal(os.Stdout), stderrTTY: terminal(os.Stderr), now: time.Now,
	}
}

// terminal reports whether f is a character device (a terminal), without a dependency for it.
func terminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// app is one invocation: the environment, the global flags, and the API client they make.
type app struct {
	environment
	url, token, auth, region, output string
	timeout                          time.Duration
	api                              *client.Client
}

// commands are the subcommands, each built on the app's global flags and client.
var commands = []func(*app) *cobra.Command{
	submitCommand, runsCommand, runCommand, cancelCommand, priorityCommand,
	queueCommand, nodesCommand, leasesCommand, drainCommand, undrainCommand,
	agentCommand, versionCommand,
}

const defaultURL = "http://127.0.0.1:3000"

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "mediator",
		Short: "Submit and follow runs on Mediator, look at its queue and fleet, and put a machine to work",
		Long: `mediator talks to a Mediator API: it submits runs (YAML or JSON, the body POST /v1/runs
takes) and follows them to their end, lists and inspects runs, cancels them, and shows the
queue, the fleet and the leases. mediator agent makes this machine a node that runs steps.

The API is --url (or MEDIATOR_URL; ` + defaultURL + `, what make dev serves). Credentials
are a bearer token (--token or MEDIATOR_TOKEN; make dev takes dev-client, dev-admin, ...) or,
with --auth iam, AWS SigV4 from the default AWS credential chain, for API Gateway's IAM
authorizer. Every call is retried with backoff while the API answers 503 or cannot be
reached, for up to --timeout.

` + exitCodesHelp,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.settle(cmd) },
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	f := root.PersistentFlags()
	f.StringVar(&a.url, "url", "", "the API's URL (env MEDIATOR_URL; default "+defaultURL+")")
	f.StringVar(&a.token, "token", "", "a bearer token (env MEDIATOR_TOKEN)")
	f.StringVar(&a.auth, "auth", "", "how to authenticate: token, or iam for AWS SigV4 (env MEDIATOR_AUTH; default token)")
	f.StringVar(&a.region, "region", "", "with --auth iam: the region to sign for (default: from the API's host name, else AWS_REGION)")
	f.StringVarP(&a.output, "output", "o", "table", "table or json (json prints the API's answers as received)")
	f.DurationVar(&a.timeout, "timeout", client.DefaultRetry.Budget, "how long one API call may take, its retries included")
	root.AddGroup(&cobra.Group{ID: "runs", Title: "Runs:"}, &cobra.Group{ID: "fleet", Title: "The queue and the fleet:"},
		&cobra.Group{ID: "node", Title: "This machine as a node:"})
	for _, c := range commands {
		root.AddCommand(c(a))
	}
	return root
}

// settle reads the global flags' environment defaults and checks them.
func (a *app) settle(cmd *cobra.Command) error {
	flags := cmd.Flags()
	fromEnv := func(value *string, flag, env, fallback string) {
		if !flags.Changed(flag) {
			if v := a.getenv(env); v != "" {
				*value = v
			} else if *value == "" {
				*value = fallback
			}
		}
	}
	fromEnv(&a.url, "url", "MEDIATOR_URL", defaultURL)
	fromEnv(&a.token, "token", "MEDIATOR_TOKEN", "")
	fromEnv(&a.auth, "auth", "MEDIATOR_AUTH", "token")
	switch a.output {
	case "table", "json":
	default:
		return usagef("--output must be table or json, not %q", a.output)
	}
	switch a.auth {
	case "token", "bearer", "iam":
	default:
		return usagef("--auth must be token or iam, not %q", a.auth)
	}
	if a.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	return nil
}

// client is the API client the global flags describe, made once.
func (a *app) client(ctx context.Context) (*client.Client, error) {
	if a.api != nil {
		return a.api, nil
	}
	api, err := a.newClient(ctx, client.WithUserAgent("mediator-cli/"+version()), client.WithRetry(client.Retry{Budget: a.timeout}))
	if err != nil {
		return nil, err
	}
	a.api = api
	return api, nil
}

// newClient is an API client with the global flags' URL and credentials, and opts.
func (a *app) newClient(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	if a.auth == "iam" {
		signer, err := client.NewSigV4(ctx, a.region)
		if err != nil {
			return nil, usagef("--auth iam: %v", err)
		}
		opts = append(opts, client.WithAuth(signer))
	} else {
		opts = append(opts, client.WithToken(a.token))
	}
	api, err := client.New(a.url, opts...)
	if err != nil {
		return nil, usage(err)
	}
	return api, nil
}

func (a *app) json() bool { return a.output == "json" }

// run executes one command line and returns the process's exit code.
func run(ctx context.Context, args []string, env environment) int {
	a := &app{environment: env}
	root := newRoot(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(ctx, err)
	var quiet *exitError
	if !errors.As(err, &quiet) || quiet.err != nil {
		a.explain(err)
	}
	return code
}

// exitError ends a command with a code; err, when set, is said on stderr. A run's outcome is
// printed by its command and needs no more.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitWith(code int) error { return &exitError{code: code} }

// usage marks err as the caller's mistake (exit 3).
func usage(err error) error { return &exitError{code: exitUsage, err: err} }

func usagef(format string, args ...any) error { return usage(fmt.Errorf(format, args...)) }

// exitCode maps what went wrong to the documented codes.
func exitCode(ctx context.Context, err error) int {
	var ee *exitError
	var ae *client.Error
	var te *client.TransportError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.As(err, &te), client.Unavailable(err):
		return exitUnavailable
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		return exitUsage
	case errors.As(err, &ae):
		return exitUnavailable // an answer no client could use: a 2xx that is not JSON, a 3xx
	case errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	}
	return exitUsage // cobra's own: an unknown command, a missing argument
}

// explain says on stderr what went wrong; a problem with field errors lists every path.
// What the API said is written visible, as is any other error's text: it may quote a run
// file someone else wrote, or an answer that was not the API's. Such an error keeps its lines
// (cobra's "Did you mean this?" is one).
func (a *app) explain(err error) {
	w := a.stderr
	var ae *client.Error
	if !errors.As(err, &ae) {
		fmt.Fprintf(w, "mediator: %s\n", visibleLines(err.Error(), ""))
		if exitCode(context.Background(), err) == exitUsage {
			fmt.Fprintln(w, "Run 'mediator help' for usage.")
		}
		return
	}
	if a.json() && len(ae.Body) > 0 {
		writeBody(a.stdout, ae.Body)
	}
	what := ae.Title
	if ae.Detail != "" && ae.Detail != ae.Title {
		what = strings.TrimSuffix(what, ".")
		if what != "" {
			what += ": "
		}
		what += ae.Detail
	}
	code := ae.Code
	if code == "" {
		code = http.StatusText(ae.Status)
	}
	fmt.Fprintf(w, "mediator: %s %s: %d %s: %s\n", ae.Method, visible(ae.Path), ae.Status, visible(code), visible(what))
	for _, f := range ae.Errors {
		path := f.Path
		if path == "" {
			path = "(the body)"
		}
		fmt.Fprintf(w, "  %s: %s\n", visible(path), visible(f.Message))
	}
	if ae.Run != nil {
		fmt.Fprintf(w, "  run %s ended %s\n", visible(ae.Run.RunID), visible(strings.TrimSpace(ae.Run.State+" "+ae.Run.ReasonText())))
	}
	if ae.Attempts > 1 {
		fmt.Fprintf(w, "  (the last of %d attempts)\n", ae.Attempts)
	}
	switch ae.Status {
	case http.StatusUnauthorized:
		fmt.Fprintln(w, "  give credentials: --token or MEDIATOR_TOKEN, or --auth iam")
	}
}

// writeBody prints an answer's body as received, ending in one newline.
func writeBody(w io.Writer, body []byte) {
	_, _ = w.Write(body)
	if len(body) == 0 || body[len(body)-1] != '\n' {
		_, _ = io.WriteString(w, "\n")
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/oauth2/clientcredentials"

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
	oauth                            oauthFlags
	timeout                          time.Duration
	api                              *client.Client
}

// oauthFlags are the client credentials of the OAuth 2.0 client-credentials grant: with a token
// URL, access tokens are fetched there, renewed before they expire, and once more when the API
// answers 401.
type oauthFlags struct {
	tokenURL, clientID, secretFile string
	secret                         string // MEDIATOR_CLIENT_SECRET: never a flag, which ps would show
	scopes                         []string
}

// commands are the subcommands, each built on the app's global flags and client.
var commands = []func(*app) *cobra.Command{
	submitCommand, runsCommand, runCommand, logsCommand, cancelCommand, priorityCommand,
	holdCommand, holdsCommand, extendCommand, releaseCommand,
	queueCommand, nodesCommand, nodeCommand, leasesCommand, drainCommand, undrainCommand,
	quarantineCommand, unquarantineCommand, healthCheckCommand,
	agentCommand, versionCommand,
}

const defaultURL = "http://127.0.0.1:3000"

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "mediator",
		Short: "Submit and follow runs on Mediator, look at its queue and fleet, and put a machine to work",
		Long: `mediator talks to a Mediator API: it submits runs (YAML or JSON, the body POST /v1/runs
takes) and follows them to their end, lists and inspects runs, prints and follows their steps'
logs, cancels them, holds nodes for interactive work (hold, holds, extend, release), and shows
the queue, the fleet and the leases; admins quarantine nodes and register the health checks
that bring them back. mediator agent makes this machine a node that runs steps.

The API is --url (or MEDIATOR_URL; ` + defaultURL + `, what make dev serves). Credentials
are one of:
  a bearer token      --token or MEDIATOR_TOKEN (make dev takes dev-client, dev-admin, ...)
  client credentials  --token-url, --client-id, the secret in --client-secret-file or
                      MEDIATOR_CLIENT_SECRET, optional --scope (OAuth 2.0, for API Gateway's
                      JWT authorizer; make dev AUTH=jwt prints its clients): access tokens are
                      fetched, renewed before they expire, and once more after a 401
  AWS SigV4           --auth iam, from the default AWS credential chain, for API Gateway's IAM
                      authorizer
Each flag has its variable: MEDIATOR_TOKEN_URL, MEDIATOR_CLIENT_ID,
MEDIATOR_CLIENT_SECRET_FILE, MEDIATOR_SCOPE (space-separated); a flag beats its variable.
Every call is retried with backoff while the API answers 503 or cannot be reached, for up to
--timeout.

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
	f.StringVar(&a.oauth.tokenURL, "token-url", "", "an OAuth 2.0 token endpoint: fetch access tokens there by the client-credentials grant (env MEDIATOR_TOKEN_URL)")
	f.StringVar(&a.oauth.clientID, "client-id", "", "with --token-url: the client's id (env MEDIATOR_CLIENT_ID)")
	f.StringVar(&a.oauth.secretFile, "client-secret-file", "", "with --token-url: a file holding the client's secret (env MEDIATOR_CLIENT_SECRET_FILE, or the secret itself in MEDIATOR_CLIENT_SECRET)")
	f.StringArrayVar(&a.oauth.scopes, "scope", nil, "with --token-url: a scope to ask for, repeatable or space-separated (env MEDIATOR_SCOPE; default: what the issuer gives the client)")
	f.StringVar(&a.auth, "auth", "", "how to authenticate: token (--token, or --token-url's), or iam for AWS SigV4 (env MEDIATOR_AUTH; default token)")
	f.StringVar(&a.region, "region", "", "with --auth iam: the region to sign for (default: from the API's host name, else AWS_REGION)")
	f.StringVarP(&a.output, "output", "o", "table", "table or json (json prints the API's answers as received)")
	f.DurationVar(&a.timeout, "timeout", client.DefaultRetry.Budget, "how long one API call may take, its retries included")
	root.AddGroup(&cobra.Group{ID: "runs", Title: "Runs:"}, &cobra.Group{ID: "holds", Title: "Holds (nodes kept for interactive work):"},
		&cobra.Group{ID: "fleet", Title: "The queue and the fleet:"},
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
	fromEnv(&a.auth, "auth", "MEDIATOR_AUTH", "token")
	if err := a.settleCredentials(flags); err != nil {
		return err
	}
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

// settleCredentials reads the bearer token or the client credentials, each flag or its
// variable, and refuses what names two kinds of credentials or half of one. A flag beats the
// other kind's variable — `--token dev-admin` with MEDIATOR_TOKEN_URL exported uses the token
// — but the two variables together, or the two flags, say two things and stop.
func (a *app) settleCredentials(flags *pflag.FlagSet) error {
	env := func(value *string, flag, name string) {
		if !flags.Changed(flag) {
			*value = a.getenv(name)
		}
	}
	o := &a.oauth
	switch tokenFlag, urlFlag := flags.Changed("token"), flags.Changed("token-url"); {
	case tokenFlag && urlFlag:
		return usagef("--token and --token-url are two kinds of credentials: give one")
	case tokenFlag, urlFlag: // the other kind's variable is not read
	default:
		a.token, o.tokenURL = a.getenv("MEDIATOR_TOKEN"), a.getenv("MEDIATOR_TOKEN_URL")
		if a.token != "" && o.tokenURL != "" {
			return usagef("MEDIATOR_TOKEN and MEDIATOR_TOKEN_URL are both set: unset one, or give --token or --token-url")
		}
	}
	if a.auth == "iam" && o.tokenURL != "" {
		return usagef("--auth iam signs with AWS credentials: it takes no --token-url (or MEDIATOR_TOKEN_URL)")
	}
	env(&o.clientID, "client-id", "MEDIATOR_CLIENT_ID")
	env(&o.secretFile, "client-secret-file", "MEDIATOR_CLIENT_SECRET_FILE")
	if !flags.Changed("scope") {
		o.scopes = strings.Fields(a.getenv("MEDIATOR_SCOPE"))
	} else {
		var split []string
		for _, s := range o.scopes {
			split = append(split, strings.Fields(s)...)
		}
		o.scopes = split
	}
	if o.tokenURL == "" {
		if flags.Changed("client-id") || flags.Changed("client-secret-file") || flags.Changed("scope") {
			return usagef("--client-id, --client-secret-file and --scope go with --token-url (or MEDIATOR_TOKEN_URL)")
		}
		return nil
	}
	if err := tokenURLOK(o.tokenURL); err != nil {
		return usage(err)
	}
	if o.clientID == "" {
		return usagef("--token-url needs --client-id (or MEDIATOR_CLIENT_ID)")
	}
	// The file flag beats the secret's variable; the file's variable and the secret's together
	// say two things.
	envSecret := a.getenv("MEDIATOR_CLIENT_SECRET")
	switch {
	case o.secretFile != "" && envSecret != "" && !flags.Changed("client-secret-file"):
		return usagef("MEDIATOR_CLIENT_SECRET_FILE and MEDIATOR_CLIENT_SECRET are both set: unset one")
	case o.secretFile != "":
		b, err := os.ReadFile(o.secretFile)
		if err != nil {
			return usagef("the client secret: %v", err)
		}
		// The line a file ends with (echo, an editor) is not the secret's.
		o.secret = strings.TrimRight(string(b), "\r\n")
		if o.secret == "" {
			return usagef("the client secret file %s is empty", o.secretFile)
		}
	case envSecret != "":
		o.secret = envSecret
	default:
		return usagef("--token-url needs the client's secret: --client-secret-file (or MEDIATOR_CLIENT_SECRET_FILE), or MEDIATOR_CLIENT_SECRET")
	}
	return nil
}

// tokenURLOK: the client's secret goes to the token endpoint in every request, so over TLS —
// plain http only to this machine (make dev's issuer), where nothing on the way can read it.
func tokenURLOK(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("--token-url %q must be an https:// URL", raw)
	}
	if u.Scheme == "http" {
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--token-url %q must be https:// (http:// only to a loopback address): the client's secret goes with every request", raw)
		}
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
	} else if o := a.oauth; o.tokenURL != "" {
		opts = append(opts, client.WithAuth(client.NewClientCredentials(clientcredentials.Config{
			ClientID: o.clientID, ClientSecret: o.secret, TokenURL: o.tokenURL, Scopes: o.scopes,
		}, nil)))
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
		fmt.Fprintln(w, "  give credentials: --token or MEDIATOR_TOKEN, --token-url with --client-id (client credentials), or --auth iam")
	}
}

// writeBody prints an answer's body as received, ending in one newline.
func writeBody(w io.Writer, body []byte) {
	_, _ = w.Write(body)
	if len(body) == 0 || body[len(body)-1] != '\n' {
		_, _ = io.WriteString(w, "\n")
	}
}

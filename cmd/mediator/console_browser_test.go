//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"mediator/localdev/apitest"
	"mediator/localdev/gateway"
	"mediator/localdev/issuer"
	"mediator/shared/client"
	"mediator/shared/config"
)

// These tests drive the web console (/console/) in a real headless Chromium against the real
// local stack — the handlers behind the local gateway on PostgreSQL, the local S3 for the logs
// — with real agents as processes running real steps. They wait on what the page shows
// (chromedp's waits and polls on the DOM), never on the clock; the deadline only turns a hang
// into a failure. One browser serves every test, a tab each.

// browser is the one Chromium of the test binary, started by the first test that needs it and
// stopped when the tests end (TestMain's atExit).
var browser struct {
	once   sync.Once
	ctx    context.Context
	err    error
	cancel func()
}

// chromiumPath is the browser the tests drive: CHROMIUM when set, else chromium on the PATH
// (Debian's package), or Homebrew's cask on macOS (localdev/prerequisites/list.txt).
func chromiumPath() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "/Applications/Chromium.app/Contents/MacOS/Chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium is not installed: the console's browser tests drive it headless " +
		"(apt-get install chromium; `make prerequisites` lists what make test needs), or set CHROMIUM to a Chromium binary")
}

// tab is a new tab of the shared browser, closed when the test ends, whose actions share one
// deadline.
func tab(t *testing.T) context.Context {
	t.Helper()
	browser.once.Do(func() {
		path, err := chromiumPath()
		if err != nil {
			browser.err = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.WindowSize(1280, 800),
			chromedp.Flag("disable-dev-shm-usage", true),
		)
		if os.Geteuid() == 0 { // Chromium refuses to sandbox itself as root
			opts = append(opts, chromedp.NoSandbox)
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			bcancel()
			acancel()
			browser.err = fmt.Errorf("starting chromium (%s): %w", path, err)
			return
		}
		browser.ctx = bctx
		browser.cancel = func() { bcancel(); acancel() }
		atExit = append(atExit, browser.cancel)
	})
	if browser.err != nil {
		t.Fatal(browser.err)
	}
	ctx, closeTab := chromedp.NewContext(browser.ctx)
	// The tab opens at its first action, which must not carry the deadline (chromedp.Run).
	if err := chromedp.Do(ctx); err != nil {
		closeTab()
		t.Fatalf("a new tab: %v", err)
	}
	// What the page logs — a script's exception, a refused fetch, a CSP violation — is kept for
	// a failure's message.
	said := &pageLog{}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			said.add(m.String())
		}
	}()
	t.Cleanup(func() {
		// The app needs nothing its policy refuses: a refusal is a bug (an inline style, a
		// fetch to an origin connect-src does not name), whatever the test looked at.
		if text := said.text(); strings.Contains(text, "Content Security Policy") {
			t.Errorf("the page broke its Content-Security-Policy:\n%s", text)
		} else if t.Failed() {
			t.Logf("the page's console said:\n%s", text)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, patience)
	t.Cleanup(func() { cancel(); closeTab() })
	return ctx
}

// pageLog is what a tab's console said.
type pageLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *pageLog) add(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }

func (l *pageLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// do runs actions in the tab, failing the test with what the page shows when one fails.
func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%v; the page at the time:\n%s", err, onPage(ctx))
	}
}

// onPage is the tab's address and text, for a failure's message.
func onPage(ctx context.Context) string {
	last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(last, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	return s
}

// read runs one action that answers a value in the tab.
func read[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%v; the page at the time:\n%s", err, onPage(ctx))
	}
	return v
}

// pageHolds waits for a JavaScript expression to be true in the page.
func pageHolds(expr string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
}

// script runs JavaScript in the page for what it does.
func script(expr string) chromedp.Action[chromedp.Void] { return void(chromedp.Evaluate[any](expr)) }

func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// signIn opens the console at path, signs in with the form as token, and waits for the view
// to render.
func signIn(t *testing.T, ctx context.Context, base, path, token string) {
	t.Helper()
	do(t, ctx,
		chromedp.Navigate(base+path),
		chromedp.WaitVisible(`#signin input[name=token]`),
		chromedp.SendKeys(`#signin input[name=token]`, token),
		chromedp.Click(`#signin button[type=submit]`),
		pageHolds(`document.body.dataset.rendered && document.body.dataset.rendered !== 'signin'`),
	)
}

// js quotes s as a JavaScript string.
func js(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>' || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// cell is the text of a cell of a row of the fleet, by the node and the cell's class.
func cell(node, class string) string {
	return `(document.querySelector('tr[data-node=` + js(node) + `] td.` + class + `')?.textContent ?? '')`
}

// The sign-in form takes a development token; the fleet then lists every node, each with its
// state, and the counts at the top add up.
func TestConsoleSignInShowsTheFleet(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	nodes := []string{"rack-1", "rack-2", "rack-3"}
	for _, n := range nodes {
		startAgent(t, base, n, agentOpts{labels: []string{"board=rpi4"}}).waitFor("heartbeating")
	}
	ctx := tab(t)
	signIn(t, ctx, base, "/console/", "dev-admin")
	for _, n := range nodes {
		do(t, ctx, pageHolds(cell(n, "state")+` === 'idle' && `+cell(n, "labels")+`.includes('board=rpi4')`))
	}
	// The label filter narrows the table, and the address keeps it.
	do(t, ctx,
		chromedp.SendKeys(`input[name=label]`, "node_id=rack-2"),
		pageHolds(`document.querySelectorAll('#nodes tbody tr').length === 1 && document.querySelector('tr[data-node=rack-2]') !== null &&
			new URLSearchParams(location.search).get('label') === 'node_id=rack-2'`),
	)
	if idle := read(t, ctx, chromedp.Text(`#fleet-summary .by-state [data-count=idle] b`)); idle != "3" {
		t.Fatalf("the fleet counts %q idle nodes, want 3", idle)
	}
	// The token is the tab's, in sessionStorage; the address never holds it.
	href := read(t, ctx, chromedp.Evaluate[string](`location.href`))
	stored := read(t, ctx, chromedp.Evaluate[string](`sessionStorage.getItem('mediator.token')`))
	if strings.Contains(href, "dev-admin") || stored != "dev-admin" {
		t.Fatalf("address %q, sessionStorage %q", href, stored)
	}
}

// A client is not an admin: the fleet says so rather than failing.
func TestConsoleFleetTellsAClientItIsForAdmins(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	ctx := tab(t)
	signIn(t, ctx, base, "/console/", "dev-client")
	do(t, ctx, pageHolds(`document.querySelector('.message.forbidden')?.textContent.includes('for admins')`))
}

// A stack whose people sign with IAM has a console that says it cannot sign in, and points
// to the command line; it offers no form to paste a token into.
func TestConsoleOnAnIAMStackPointsToTheCLI(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Console.SignIn = "iam" }))
	base := env.Serve()
	ctx := tab(t)
	do(t, ctx,
		chromedp.Navigate(base+"/console/runs"),
		pageHolds(`document.body.dataset.rendered === 'signin'`),
		pageHolds(`(document.querySelector('.message.iam')?.textContent ?? '').includes('AuthorizerType=JWT') &&
			(document.querySelector('.signin pre')?.textContent ?? '').startsWith('mediator --url ') &&
			document.querySelector('input[name=token]') === null`),
	)
}

// Under make dev AUTH=jwt the console signs a person in at the local issuer — the
// authorization code with PKCE (S256), as at a Cognito user pool — and calls the API with the
// access token it traded the code for, which the gateway checks as API Gateway's JWT
// authorizer does; the code leaves the address.
func TestConsoleSignsInWithPKCEAtTheIssuer(t *testing.T) {
	t.Parallel()
	iss, err := issuer.Start("127.0.0.1:0", issuer.Options{Clients: issuer.DevClients()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Close() })
	env := apitest.New(t, apitest.Configure(func(c *config.Config) { c.Console = iss.ConsoleSignIn() }))
	base := env.ServeJWT(&gateway.JWTAuthorizer{Issuer: iss.URL(), Audience: iss.ClientIDs()})
	ctx := tab(t)
	do(t, ctx,
		chromedp.Navigate(base+"/console/queue"),
		chromedp.WaitVisible(`#oauth`),
		chromedp.Click(`#oauth`),
		chromedp.WaitVisible(`#as-dev-admin-person`),
		chromedp.Click(`#as-dev-admin-person`),
		// Through the issuer's redirect and the callback's token request, back to the queue:
		// waited for by selector, which outlives the navigations in between.
		chromedp.WaitReady(`body[data-rendered=queue]`),
		pageHolds(`location.pathname === '/console/queue' && location.search === ''`),
		// An admin's view: the fleet answers (it is empty), which a client's token would not.
		chromedp.Click(`#nav a[data-view=fleet]`),
		pageHolds(`document.body.dataset.rendered === 'fleet' && document.querySelector('#nodes') !== null`),
	)
	token := read(t, ctx, chromedp.Evaluate[string](`sessionStorage.getItem('mediator.token')`))
	if !strings.HasPrefix(token, "ey") || iss.Issued(issuer.ConsoleClient) != 1 {
		t.Fatalf("token %q, %d issued to the console", token, iss.Issued(issuer.ConsoleClient))
	}
}

// A run submitted through the API moves on its page from QUEUED to RUNNING to SUCCEEDED
// without a reload, and its step's log fills in while the step runs.
func TestConsoleFollowsARunAndItsLog(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	gate := fifo(t, "gate")
	submit(t, base, client.RunRequest{
		RunID: "live-1", Needs: []string{"board=rpi4"}, WaitForCapacity: true,
		Steps: []client.StepRequest{{ID: "count", Spec: spec("cmd", `echo line1; echo line2; read x < "$GATE"; echo line3`,
			"env", map[string]string{"GATE": gate})}},
	})
	ctx := tab(t)
	signIn(t, ctx, base, "/console/runs/live-1", "dev-client")
	do(t, ctx,
		pageHolds(`document.querySelector('#run-state')?.textContent === 'QUEUED'`),
		script(`window.__sameDocument = 1`),
	)
	startAgent(t, base, "live-node", agentOpts{labels: []string{"board=rpi4"}})
	// The step waits at the gate: what it printed so far is on the page while it runs.
	do(t, ctx, pageHolds(`document.querySelector('#run-state')?.textContent === 'RUNNING' &&
		(document.querySelector('pre[data-log=count]')?.textContent ?? '').includes('line1\nline2\n')`))
	toStep(t, gate, "go\n")
	do(t, ctx, pageHolds(`document.querySelector('#run-state')?.textContent === 'SUCCEEDED' &&
		(document.querySelector('pre[data-log=count]')?.textContent ?? '').endsWith('line1\nline2\nline3\n') &&
		window.__sameDocument === 1`))
}

// A queued run's page says why it waits — its node busy with another run, which it names —
// follows the reason as it changes (the node drained, then not), and stops saying so once
// that run ends and frees the node: the run is placed, and runs.
func TestConsoleShowsWhyARunWaits(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	startAgent(t, base, "only-board", agentOpts{labels: []string{"board=rpi4"}}).waitFor("heartbeating")
	gate := fifo(t, "gate")
	submit(t, base, client.RunRequest{RunID: "first", Needs: []string{"board=rpi4"},
		Steps: []client.StepRequest{{ID: "hold", Spec: spec("cmd", `read x < "$GATE"`, "env", map[string]string{"GATE": gate})}}})
	if s := submit(t, base, client.RunRequest{RunID: "second", Needs: []string{"board=rpi4"},
		Steps: []client.StepRequest{{ID: "go", Spec: spec("cmd", `echo placed`)}}}); !s.Queued() {
		t.Fatalf("second: %d, want 202 queued", s.Status)
	}
	ctx := tab(t)
	signIn(t, ctx, base, "/console/runs/second", "dev-client")
	do(t, ctx, pageHolds(`document.querySelector('#run-state')?.textContent === 'QUEUED' &&
		document.querySelector('#waiting-reason')?.textContent === 'all_busy' &&
		(document.querySelector('#run-waiting .role-counts')?.textContent ?? '').includes('first')`))
	// Drained, the node is unavailable rather than busy: the page follows, and back.
	admin := api(t, base, "dev-admin")
	if _, err := admin.Drain(context.Background(), "only-board"); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, pageHolds(`document.querySelector('#waiting-reason')?.textContent === 'unavailable'`))
	if _, err := admin.Undrain(context.Background(), "only-board"); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, pageHolds(`document.querySelector('#waiting-reason')?.textContent === 'all_busy'`))
	toStep(t, gate, "go\n")
	do(t, ctx, pageHolds(`document.querySelector('#run-state')?.textContent === 'SUCCEEDED' &&
		document.querySelector('#waiting-reason') === null`))
}

// A run's page acts on it: an admin raises a queued run's priority, its owner cancels it.
func TestConsoleSetsPriorityAndCancels(t *testing.T) {
	t.Parallel()
	_, base := serve(t)
	submit(t, base, client.RunRequest{RunID: "later", Needs: []string{"board=none-yet"}, WaitForCapacity: true,
		Steps: []client.StepRequest{{ID: "s", Spec: spec("cmd", "true")}}})
	admin := tab(t)
	signIn(t, admin, base, "/console/runs/later?owner=client:dev-client", "dev-admin")
	do(t, admin,
		chromedp.WaitVisible(`#priority input[name=priority]`),
		chromedp.SetValue(`#priority input[name=priority]`, "90"),
		chromedp.Click(`#priority button[type=submit]`),
		pageHolds(`[...document.querySelectorAll('#run-head dt')].some((dt) => dt.textContent === 'priority' && dt.nextElementSibling.textContent === '90')`),
	)
	owner := tab(t)
	signIn(t, owner, base, "/console/runs/later", "dev-client")
	do(t, owner,
		pageHolds(`document.querySelector('#run-state')?.textContent === 'QUEUED' && document.querySelector('#priority') === null`),
		chromedp.Click(`#cancel`),
		pageHolds(`document.querySelector('#run-state')?.textContent === 'CANCELLED' && document.querySelector('#cancel') === null`),
	)
}

// An admin sees the hold on a node and drains it from its page; the fleet then shows it
// drained, by that admin, and still held.
func TestConsoleDrainsANode(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	startAgent(t, base, "drain-me", agentOpts{labels: []string{"board=rpi4"}}).waitFor("heartbeating")
	hold := 600
	if s := submit(t, base, client.RunRequest{RunID: "bench-hold", Needs: []string{"board=rpi4"}, HoldSeconds: &hold}); !s.Placed() {
		t.Fatalf("the hold: %d, want 201 placed", s.Status)
	}
	ctx := tab(t)
	signIn(t, ctx, base, "/console/nodes/drain-me", "dev-admin")
	do(t, ctx,
		// The node's page names the hold on it, and its owner.
		pageHolds(`(document.querySelector('#node-holds')?.textContent ?? '').includes('bench-holdclient:dev-client')`),
		chromedp.WaitVisible(`#drain`),
		chromedp.Click(`#drain`),
		pageHolds(`(document.querySelector('#node-drain')?.textContent ?? '').includes('drained by admin:dev-admin')`),
		chromedp.WaitVisible(`#undrain`),
		chromedp.Click(`#nav a[data-view=fleet]`),
		// Held, it stays leased until the hold ends, drained all the same.
		pageHolds(cell("drain-me", "drain")+` === 'drained by admin:dev-admin' && `+cell("drain-me", "state")+` === 'leased' &&
			`+cell("drain-me", "lease")+`.startsWith('bench-hold as main')`),
	)
}

// hostile is text that would run script if the console inserted it as markup.
var hostile = []string{`<img src=x onerror=window.__pwned=1>`, `<script>window.__pwned=1</script>`}

// What steps print — their messages, their log lines, their outputs — and an admin's
// quarantine reason hold markup here; the console shows it as the characters it is, and none
// of it runs. (Labels, ids and names cannot
// hold < or >: the API refuses them.)
func TestConsoleShowsTheAPIsTextAsText(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	startAgent(t, base, "text-node", agentOpts{labels: []string{"board=rpi4"}}).waitFor("heartbeating")
	var cmd strings.Builder
	for _, s := range hostile {
		fmt.Fprintf(&cmd, "echo '%s'; ", s)
	}
	fmt.Fprintf(&cmd, `echo 'html=%s' >> "$MEDIATOR_OUTPUTS"`, hostile[0])
	submit(t, base, client.RunRequest{
		RunID: "markup", Needs: []string{"board=rpi4"},
		Steps: []client.StepRequest{{ID: "shout", Spec: spec("cmd", cmd.String())}},
	})
	ctx := tab(t)
	signIn(t, ctx, base, "/console/runs/markup", "dev-client")
	do(t, ctx, pageHolds(`document.querySelector('#run-state')?.textContent === 'SUCCEEDED' &&
		(document.querySelector('pre[data-log=shout]')?.textContent ?? '').includes(`+js(hostile[1])+`)`))
	message := read(t, ctx, chromedp.TextContent(`tr[data-step=shout] td.step-message`))
	log := read(t, ctx, chromedp.TextContent(`pre[data-log=shout]`))
	outputs := read(t, ctx, chromedp.TextContent(`#run-outputs`))
	pwned := read(t, ctx, chromedp.Evaluate[bool](`window.__pwned !== undefined`))
	injected := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#view img, #view script').length`))
	for _, s := range hostile {
		if !strings.Contains(message, s) || !strings.Contains(log, s) {
			t.Errorf("%q is not shown as text: message %q, log %q", s, message, log)
		}
	}
	if !strings.Contains(outputs, hostile[0]) {
		t.Errorf("the output is not shown as text: %q", outputs)
	}
	if pwned || injected != 0 {
		t.Fatalf("the page ran or made markup from the API's text: __pwned set %t, %d img/script elements", pwned, injected)
	}

	// An admin's quarantine reason, on the fleet and the node's page.
	if _, err := api(t, base, "dev-admin").Quarantine(context.Background(), "text-node", hostile[1]); err != nil {
		t.Fatal(err)
	}
	admin := tab(t)
	signIn(t, admin, base, "/console/", "dev-admin")
	do(t, admin, pageHolds(cell("text-node", "health")+`.includes(`+js(hostile[1])+`)`),
		chromedp.Click(`a.node-link`),
		pageHolds(`(document.querySelector('#node-health-now')?.textContent ?? '').includes(`+js(hostile[1])+`)`))
	pwned = read(t, admin, chromedp.Evaluate[bool](`window.__pwned !== undefined`))
	injected = read(t, admin, chromedp.Evaluate[int](`document.querySelectorAll('#view img, #view script').length`))
	if pwned || injected != 0 {
		t.Fatalf("the node's pages ran or made markup from its reason: __pwned set %t, %d img/script elements", pwned, injected)
	}
}

// get is a plain GET, as curl would send it.
func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The console is served by the API itself, without credentials, under its Content-Security-
// Policy: the app at /console/ and at every address under it that is no file, its files with
// their types; the API's own routes are as they were.
func TestConsoleIsServedUnderItsPolicy(t *testing.T) {
	t.Parallel()
	env, base := serve(t)
	s3 := strings.TrimSuffix(env.S3.URL(), "/")
	wantCSP := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' " + s3 +
		"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	index := ""
	for _, path := range []string{"/console", "/console/", "/console/runs/r1", "/console/anything/deep/er?x=1", "/console/..%2f..%2fgo.mod", "/console/static/app.js"} {
		resp, body := get(t, base+path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != wantCSP {
			t.Fatalf("GET %s: Content-Security-Policy\n%s\nwant\n%s", path, got, wantCSP)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET %s: no nosniff", path)
		}
		if index == "" {
			index = body
		}
		if body != index || !strings.Contains(body, `<script type="module" src="/console/app.js">`) {
			t.Fatalf("GET %s is not the app:\n%s", path, body)
		}
	}
	for path, want := range map[string]string{
		"/console/app.js":      "text/javascript; charset=utf-8",
		"/console/app.css":     "text/css; charset=utf-8",
		"/console/config.json": "application/json",
	} {
		resp, body := get(t, base+path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want || resp.Header.Get("Content-Security-Policy") != wantCSP || body == index {
			t.Fatalf("GET %s: %d %s, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"))
		}
		if path == "/console/config.json" && strings.TrimSpace(body) != `{"sign_in":"token"}` {
			t.Fatalf("config.json: %s", body)
		}
	}
	// The API is what it was: JSON, its own headers, credentials required.
	resp, body := get(t, base+"/v1/runs")
	if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Content-Security-Policy") != "" {
		t.Fatalf("GET /v1/runs: %d %s CSP %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"), body)
	}
	if resp, _ := get(t, base+"/healthz"); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /healthz: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// A view reads the API again every few seconds while its tab is visible, and not once while it
// is hidden. The page's clock is the browser's virtual one (Emulation.setVirtualTimePolicy):
// ten seconds of the app's timers pass at once, without the test waiting for them.
func TestConsoleRefreshesOnlyWhileVisible(t *testing.T) {
	t.Parallel()
	_, base := serveAgents(t, agentTTL)
	ctx := tab(t)
	signIn(t, ctx, base, "/console/runs", "dev-client")
	// Every API call from here on is counted; the app calls fetch at each call.
	do(t, ctx, script(`window.__apiCalls = 0; { const f = window.fetch;
		window.fetch = (u, ...rest) => { if (String(u).startsWith('/v1/')) window.__apiCalls++; return f(u, ...rest); }; }`))
	pass := func(policy emulation.VirtualTimePolicy) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(emulation.VirtualTimeBudgetExpired, nil,
			func(ctx context.Context, _ *chromedp.Target) (emulation.SetVirtualTimePolicyResult, error) {
				budget := 10000.0 // ms
				return chromedp.Call(ctx, emulation.SetVirtualTimePolicy, emulation.SetVirtualTimePolicyParams{Policy: policy, Budget: &budget})
			})); err != nil {
			t.Fatalf("ten seconds of the page's time: %v", err)
		}
	}
	do(t, ctx, script(`Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
		document.dispatchEvent(new Event('visibilitychange'))`))
	pass(emulation.VirtualTimePolicyAdvance)
	if n := read(t, ctx, chromedp.Evaluate[int](`window.__apiCalls`)); n != 0 {
		t.Fatalf("a hidden tab called the API %d times in ten seconds", n)
	}
	do(t, ctx, script(`Object.defineProperty(document, 'visibilityState', {value: 'visible', configurable: true});
		document.dispatchEvent(new Event('visibilitychange'))`))
	pass(emulation.VirtualTimePolicyPauseIfNetworkFetchesPending)
	if n := read(t, ctx, chromedp.Evaluate[int](`window.__apiCalls`)); n < 3 {
		t.Fatalf("a visible tab called the API %d times in ten seconds, want one every few", n)
	}
}

package upkeep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/cfn"

	"mediator/migrations"
	"mediator/shared/startup"
	"mediator/shared/store"
)

// Migrated is the migrate function's answer to a direct invocation.
type Migrated struct {
	SchemaVersion uint `json:"schema_version"`
}

// SchemaResourceID is the custom resource's physical id. It never changes, so an Update is
// never taken for a replacement (CloudFormation would Delete the old one).
const SchemaResourceID = "mediator-schema"

// AnswerMargin is the part of an invocation kept for the answer: the migration is given up this
// long before the invocation's deadline, which leaves the store up to 5 s to end its session
// (store.Migrate) and answerTimeout for the PUT to CloudFormation. A custom resource that never
// answers holds the stack until the resource's ServiceTimeout, and its rollback as long again.
const AnswerMargin = 15 * time.Second

// answerTimeout bounds the PUT of the answer.
const answerTimeout = 8 * time.Second

// Migrator is the migrate function's handler (Handle). A deploy invokes it as a CloudFormation
// custom resource (cfn.Event: it answers CloudFormation at the event's ResponseURL); an operator
// or `make migrate` invokes it directly with any other JSON (it answers the schema version). It
// migrates on every Create and Update (an up-to-date schema is a no-op), and turns the event
// outbox on or off as EVENT_BUS_NAME says: the deploy that changes the setting runs it.
//
// Nothing is built before the first event: a bad setting, a secret that cannot be read or a
// database that cannot be reached is a FAILED answer with its reason, where an init error would
// answer nothing and leave CloudFormation waiting.
type Migrator struct {
	// Open builds what a migration needs — the configuration, the credentials, the store. It is
	// called in the first invocation that needs it, and again in the next after it failed.
	Open func(context.Context) (startup.Deps, error)
	// Migrations are the files to apply; nil is migrations.FS.
	Migrations fs.FS

	mu     sync.Mutex
	opened *startup.Deps
}

// MigrateFunction is the migrate function's Migrator, reading its settings through getenv.
func MigrateFunction(getenv func(string) string) *Migrator {
	return &Migrator{Open: func(ctx context.Context) (startup.Deps, error) { return startup.Open(ctx, "migrate", getenv) }}
}

// Migrate is the handler of a Migrator over deps already open: make dev and make migrate,
// which open them themselves.
func Migrate(d startup.Deps) func(context.Context, json.RawMessage) (any, error) {
	return (&Migrator{Open: func(context.Context) (startup.Deps, error) { return d, nil }}).Handle
}

// Handle answers one invocation. As a custom resource it answers CloudFormation exactly once,
// whatever happens, and returns only the PUT's own failure; Lambda then retries the event as
// its retry policy allows.
func (m *Migrator) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var ev cfn.Event
	if json.Unmarshal(raw, &ev) == nil && ev.RequestType != "" && ev.ResponseURL != "" {
		return nil, m.resource(ctx, ev)
	}
	v, err := m.migrate(ctx)
	return Migrated{SchemaVersion: v}, err
}

// resource is the migration as a deploy's custom resource: Create and Update migrate, Delete
// keeps the schema (migrations only add, and deleting a stack must not drop the data), without
// reading the configuration or touching the database, so a stack whose settings broke can
// still roll back and be deleted.
func (m *Migrator) resource(ctx context.Context, ev cfn.Event) error {
	resp := cfn.NewResponse(&ev)
	// The id CloudFormation holds, answered back: another would read as a replacement.
	resp.PhysicalResourceID = ev.PhysicalResourceID
	if ev.RequestType == cfn.RequestCreate || resp.PhysicalResourceID == "" {
		resp.PhysicalResourceID = SchemaResourceID
	}
	if ev.RequestType == cfn.RequestDelete {
		resp.Status = cfn.StatusSuccess
	} else {
		resp.Status, resp.Reason, resp.Data = m.outcome(ctx)
	}
	m.log().Info("custom resource", "request", ev.RequestType, "status", resp.Status, "reason", resp.Reason,
		"logical_id", ev.LogicalResourceID, "request_id", ev.RequestID)
	return answer(ctx, ev.ResponseURL, resp)
}

// outcome is a Create's or an Update's answer: what migrate says, or FAILED for a panic.
func (m *Migrator) outcome(ctx context.Context) (status cfn.StatusType, reason string, data map[string]any) {
	defer func() {
		if p := recover(); p != nil {
			m.log().Error("migrate panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			status, reason, data = cfn.StatusFailed, "the migrate function panicked (its log has the stack)", nil
		}
	}()
	v, err := m.migrate(ctx)
	if err != nil {
		return cfn.StatusFailed, failureReason(err), nil
	}
	return cfn.StatusSuccess, "", map[string]any{"SchemaVersion": v}
}

// migrate opens what it needs and migrates, giving up AnswerMargin before ctx's deadline.
func (m *Migrator) migrate(ctx context.Context) (uint, error) {
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-AnswerMargin))
		defer cancel()
	}
	d, err := m.deps(ctx)
	if err != nil {
		m.log().Error("migrate cannot start", "error", err.Error())
		return 0, &startError{err}
	}
	fsys := m.Migrations
	if fsys == nil {
		fsys = migrations.FS
	}
	// The application role, which the migration grants to: every other function's login.
	app, err := startup.AppRole(ctx, d.Config, d.AWS)
	var v uint
	if err == nil {
		v, err = d.Store.MigrateFrom(ctx, fsys, app)
	}
	if err == nil {
		err = d.Store.SetPublishing(ctx, d.Config.EventBusName != "")
	}
	if err != nil {
		m.log().Error("migrate failed", "error", err.Error())
		return 0, err
	}
	m.log().Info("migrated", "schema_version", v, "publishing", d.Config.EventBusName != "")
	return v, nil
}

// deps are the Migrator's dependencies, opened by the first invocation that gets them.
func (m *Migrator) deps(ctx context.Context) (startup.Deps, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opened != nil {
		return *m.opened, nil
	}
	d, err := m.Open(ctx)
	if err != nil {
		return startup.Deps{}, err
	}
	m.opened = &d
	return d, nil
}

// log is the opened dependencies' log, or the default one before they are.
func (m *Migrator) log() *slog.Logger {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opened != nil && m.opened.Log != nil {
		return m.opened.Log
	}
	return slog.Default()
}

// startError is a migration that never began: the configuration, the credentials or the store.
type startError struct{ err error }

func (e *startError) Error() string { return "the migrate function cannot start: " + e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// maxReason keeps the answer well inside the 4 KB CloudFormation accepts for a whole response.
const maxReason = 1000

var (
	urlCredentials = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@]+@`)
	passwordValue  = regexp.MustCompile(`(?i)\b(password"?\s*[=:]\s*)('[^']*'|"[^"]*"|[^\s,}]+)`)
)

// failureReason is the FAILED answer's reason: short, and without credentials — a URL's user
// and password, a password setting or field — whatever error it comes from, since CloudFormation shows
// it to whoever may read the stack's events.
func failureReason(err error) string {
	var timedOut *store.MigrationTimeoutError
	var reason string
	switch {
	case errors.As(err, &timedOut) && timedOut.Ended:
		reason = err.Error() + ": deploy again (a migration that needs longer needs a longer function Timeout)"
	case errors.As(err, &timedOut):
		reason = err.Error()
	default:
		reason = err.Error() + " (the migrate function's log has the details)"
	}
	reason = urlCredentials.ReplaceAllString(reason, "${1}…@")
	reason = passwordValue.ReplaceAllString(reason, "${1}…")
	if len(reason) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut] + "…"
	}
	return reason
}

// answer PUTs the response to CloudFormation's pre-signed URL. It does not stop at ctx's end:
// an answer that may still arrive is worth the try, and Lambda ends the invocation anyway.
func answer(ctx context.Context, url string, resp *cfn.Response) error {
	body, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	// No Content-Type, as aws-lambda-go's cfn sends it: CloudFormation signs the URL with none,
	// and a signature that covers the header does not match another.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: answerTimeout}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("answer CloudFormation: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("answer CloudFormation: %s", res.Status)
	}
	return nil
}

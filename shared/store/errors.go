package store

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"mediator/shared/problem"
)

// Error is a refusal the store names. Its Code is the problem a client is told: shared/problem
// holds the one table from codes to statuses and titles, so there is no second table mapping
// these errors. Nothing above this package looks at a pgconn.PgError.
type Error struct {
	Code string
	msg  string
}

func (e *Error) Error() string { return "store: " + e.msg }

// The store's errors.
var (
	ErrNotFound      = &Error{problem.NotFound, "not found"}
	ErrRunIDConflict = &Error{problem.RunIDConflict, "run_id already used by a different request"}
	// ErrRunIDAmbiguous: an admin's run_id names runs of several owners (RunIDAmbiguousError
	// says whose).
	ErrRunIDAmbiguous  = &Error{problem.RunIDAmbiguous, "the run_id names runs of several owners"}
	ErrStaleAssignment = &Error{problem.StaleAssignment, "the step is not assigned to this node under this lease"}
	ErrNotRunnable     = &Error{problem.NotRunnable, "the step is not runnable yet"}
	ErrResultConflict  = &Error{problem.ResultConflict, "the step already has a different final result"}
	ErrRunNotLive      = &Error{problem.RunNotLive, "the run has already finished"}
	ErrRunNotQueued    = &Error{problem.RunNotQueued, "the run is not queued"}
	ErrNotAHold        = &Error{problem.NotAHold, "the run is not a hold: release and extend are a hold's"}
	// ErrNodeChanged: the node is no longer what the decision saw — another transaction leased
	// it, or it restarted — so the write was refused. A lost race, never a client's mistake:
	// past the store's own retries the client retries.
	ErrNodeChanged = &Error{problem.Unavailable, "the node was leased or restarted by another transaction"}
	// ErrRetry is a transaction that lost a race the database resolved (deadlock, serialization).
	ErrRetry = &Error{problem.Unavailable, "transient conflict"}
	// ErrUnavailable: the database could not serve the call now — a statement or lock timeout
	// (a row held elsewhere), too many connections, a shutdown, a lost connection. Transient:
	// every call is safe to repeat, so the client retries.
	ErrUnavailable = &Error{problem.Unavailable, "the database is unavailable; try again"}
	ErrLeaseTTL    = &Error{problem.Internal, "LEASE_TTL must be positive; refusing to grant a lease that never expires"}
	// ErrInvariant is a write PostgreSQL refused because it would break an invariant. Seeing
	// it means a bug in this package, never a client mistake.
	ErrInvariant = &Error{problem.Internal, "invariant violated"}
)

// RunNotLiveError is ErrRunNotLive with the run as it ended, which the answer carries.
type RunNotLiveError struct{ Run Run }

func (e *RunNotLiveError) Error() string { return ErrRunNotLive.Error() }
func (e *RunNotLiveError) Unwrap() error { return ErrRunNotLive }

// ConstraintError is a write PostgreSQL refused, with the name of the constraint that did so.
type ConstraintError struct {
	Constraint string
	Err        error // one of the sentinels above
}

func (e *ConstraintError) Error() string { return fmt.Sprintf("%v (%s)", e.Err, e.Constraint) }
func (e *ConstraintError) Unwrap() error { return e.Err }

// StatementError is an error from one statement, named by it: a log line about a failure the
// store could not translate says which statement to look at.
type StatementError struct {
	Statement string
	Err       error
}

func (e *StatementError) Error() string { return fmt.Sprintf("%s: %v", e.Statement, e.Err) }
func (e *StatementError) Unwrap() error { return e.Err }

// constraintErrors is the one table from a constraint's name to what it means. A name not
// listed here is still an ErrInvariant: every constraint of the schema guards a rule.
var constraintErrors = map[string]error{
	"leases_pkey":              ErrNodeChanged,
	"run_roles_distinct_nodes": ErrNodeChanged,
	// A lease inserted under the boot the promotion read, committing after a restart changed
	// it — or a restart committing after a promotion it did not see. Either way, retry.
	"leases_held_under_current_boot": ErrNodeChanged,
	// Two first heartbeats of one node at once: both insert, the second is refused, and its
	// retry finds the node and updates it.
	"nodes_pkey":                ErrRetry,
	"nodes_node_id_boot_id_key": ErrRetry,
}

// translate turns a pgx error into the store's vocabulary, keeping the original wrapped for
// the log. It is the only function that inspects PostgreSQL error codes.
func translate(err error) error {
	var done *StatementError
	var known *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &done), errors.As(err, &known):
		return err // translated already
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	switch pg.Code {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return fmt.Errorf("%w: %w", ErrRetry, err)
	}
	if pg.ConstraintName != "" && strings.HasPrefix(pg.Code, "23") {
		sentinel, ok := constraintErrors[pg.ConstraintName]
		if !ok {
			sentinel = ErrInvariant
		}
		return &ConstraintError{Constraint: pg.ConstraintName, Err: fmt.Errorf("%w: %s", sentinel, pg.Message)}
	}
	return err
}

// pgCode is the SQLSTATE of a PostgreSQL error, or "".
func pgCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// unavailable reports whether err is the database being unable to serve the call right now,
// rather than refusing it: nothing about the request is wrong, and the same call may succeed in
// a moment.
func unavailable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	switch code := pgCode(err); {
	case strings.HasPrefix(code, "08"): // connection exception
		return true
	case code == "57014", // query_canceled: statement_timeout
		code == "55P03",                                   // lock_not_available: lock_timeout
		code == "53300",                                   // too_many_connections
		code == "57P01", code == "57P02", code == "57P03": // admin shutdown, crash, cannot connect now
		return true
	}
	return false
}

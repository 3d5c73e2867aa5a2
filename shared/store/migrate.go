package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"mediator/migrations"
)

// The migrator's session. Every migration runs on one database session of its own, which holds
// golang-migrate's lock (a session advisory lock) for as long as it migrates, under timeouts of
// its own rather than the serving ones (5 s a statement through RDS Proxy's ProxyInitQuery),
// so no migration file sets any.
const (
	// MigratorStatementTimeout is the longest a statement of a migration may run: the longest
	// a Lambda invocation can last, enough to build an index on a large table. The deadline of
	// the migration's context bounds it further (migratorSessionTimeouts).
	MigratorStatementTimeout = 15 * time.Minute
	// MigratorLockTimeout is how long a migration waits for a lock before it gives up. While a
	// migration waits for a table, every statement queued behind it on that table waits too,
	// and serving statements give up at their own lock_timeout (DB_LOCK_TIMEOUT_MS, 2 s by
	// default): waiting no longer than that, a migration that meets a busy table fails fast and
	// says which lock it waited for, instead of stalling the traffic it waits behind for long.
	MigratorLockTimeout = 2 * time.Second
	// lockWatchEvery is how often the migrator looks at the lock its session waits for, if
	// any, to name it should the wait end in lock_timeout: several looks fit in one wait.
	lockWatchEvery = 250 * time.Millisecond
	// sessionEndWait bounds the end of a migration given up on: Migrate returns at most this
	// long after its context ends. terminateWait of it is PostgreSQL's wait for the session to
	// be gone; the rest is the round trip, and the migration's goroutine giving up.
	sessionEndWait = 5 * time.Second
	terminateWait  = 3 * time.Second
)

// Migrate applies every migration of migrations.FS that the database does not have yet, then
// grants the application role app what serving needs (grantApp, roles.go), and returns the
// schema version it is at. Already current is success, not an error, and grants all the same.
// The connection is the migrator's: what the migrations create, it owns.
//
// A schema ahead of this build — a rollback to the previous release, whose migrations stop
// short of the database's — is left as it is: migrations never take away what the previous
// release uses, so the previous code runs on the newer schema, and going down would drop what
// the newer code wrote.
//
// ctx bounds the whole migration. Should it end first, Migrate ends the migration's database
// session — its transaction rolls back, and golang-migrate's lock goes with the session — and
// returns a *MigrationTimeoutError within a few seconds (sessionEndWait). A migration that
// fails leaves the schema at the version before it, clean (versionInMigration), so the serving
// functions keep starting on it and the next try starts from there.
func Migrate(ctx context.Context, pool *pgxpool.Pool, app AppRole) (uint, error) {
	return MigrateFrom(ctx, pool, migrations.FS, app)
}

// MigrateFrom is Migrate with the migrations of fsys, a folder laid out as migrations/ is:
// tests give it sets of their own (a migration that fails, one that waits).
func MigrateFrom(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, app AppRole) (uint, error) {
	latest := migrations.LatestOf(fsys)
	v, err := withMigrator(ctx, pool, fsys, func(m *migrate.Migrate) error {
		if v, dirty, err := m.Version(); err == nil && !dirty && v > latest {
			return nil
		}
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return v, grantApp(ctx, pool, app)
}

// MigrateDown undoes every migration. Only tests call it: the round trip, and those that need an
// empty database to watch a start-up or a deploy migrate it. Nothing deployed goes down (see
// Migrate).
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) (uint, error) {
	return withMigrator(ctx, pool, migrations.FS, func(m *migrate.Migrate) error {
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
}

// MigrationTimeoutError is a migration whose context ended before it did.
type MigrationTimeoutError struct {
	// Ended: the migration's session is gone, so its transaction rolled back and the migration
	// lock is free. When false, Err says why that could not be confirmed.
	Ended bool
	Err   error
}

func (e *MigrationTimeoutError) Error() string {
	if e.Ended {
		return "store: the migration did not finish in time; its database session was ended, which rolled back its transaction and released the migration lock"
	}
	return fmt.Sprintf("store: the migration did not finish in time, and the end of its database session could not be confirmed (%v): "+
		"the migration lock may stay held until PostgreSQL ends that session (by its statement timeout at the latest)", e.Err)
}

func (e *MigrationTimeoutError) Unwrap() error { return e.Err }

// migrated is what a migration's goroutine hands back.
type migrated struct {
	version uint
	err     error
}

func withMigrator(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, fn func(*migrate.Migrate) error) (uint, error) {
	src, err := iofs.New(fsys, ".")
	if err != nil {
		return 0, fmt.Errorf("store: read migrations: %w", err)
	}
	sess, err := openMigratorSession(ctx, pool)
	if err != nil {
		_ = src.Close()
		return 0, err
	}
	// golang-migrate waits without a context (for its lock, for each statement), so the
	// migration runs on a goroutine of its own and ctx is watched here.
	watch := watchLockWaits(pool, sess.pid)
	done := make(chan migrated, 1)
	go func() { done <- sess.run(src, fn) }()
	select {
	case r := <-done:
		wait := watch.stop()
		sess.close()
		return r.version, explain(r.err, wait)
	case <-ctx.Done():
		watch.stop()
	}
	return 0, sess.end(ctx, pool, done)
}

// migratorSession is the database session a migration runs on: database/sql over one pgx
// connection (golang-migrate's driver takes a *sql.DB), which the migrator can close under
// golang-migrate and end from another session.
type migratorSession struct {
	db *sql.DB
	mu sync.Mutex
	// conn and backend are the session's connection and its backend's pid, set as it connects.
	conn    *pgx.Conn
	backend int32
}

var (
	migratorSessionStmt = stmtToFill("migrator_session")
	migratorPIDStmt     = stmt("migrator_pid")
	migratorLockWait    = stmt("migrator_lock_wait")
	endMigratorSession  = stmt("end_migrator_session")
)

// openMigratorSession connects as pool does — its URL, its credentials (an IAM token minted
// per connection included) — on a connection of the migrator's own, under ctx.
func openMigratorSession(ctx context.Context, pool *pgxpool.Pool) (*migratorSession, error) {
	pc := pool.Config()
	s := &migratorSession{}
	settings := migratorSessionTimeouts(ctx)
	opts := []stdlib.OptionOpenDB{stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		if _, err := settings.exec(ctx, c); err != nil {
			return err
		}
		var pid int32
		if err := migratorPIDStmt.queryRow(ctx, c).Scan(&pid); err != nil {
			return err
		}
		s.mu.Lock()
		s.conn, s.backend = c, pid
		s.mu.Unlock()
		return nil
	})}
	if pc.BeforeConnect != nil {
		opts = append(opts, stdlib.OptionBeforeConnect(pc.BeforeConnect))
	}
	s.db = stdlib.OpenDB(*pc.ConnConfig, opts...)
	// One connection, so golang-migrate's queries before it reserves one (WithInstance's) and
	// all after are the one session this migrator ends.
	s.db.SetMaxOpenConns(1)
	if err := s.db.PingContext(ctx); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("store: the migrator cannot connect to the database: %w", err)
	}
	return s, nil
}

// migratorSessionTimeouts are the session's settings: MigratorLockTimeout, and a statement
// timeout of what ctx has left and sessionEndWait more, up to MigratorStatementTimeout. The
// migrator gives up at ctx's end and ends the session itself; the server's own bound, just
// after, is for when the migrate function is gone before it could (Lambda ended it), and
// coming later it never turns a give-up into a statement's failure.
func migratorSessionTimeouts(ctx context.Context) statement {
	timeout := MigratorStatementTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline)+sessionEndWait)
	}
	// 0 would turn the timeout off.
	ms := max(timeout.Milliseconds(), 1)
	return migratorSessionStmt.fill(map[string]string{
		"statement_timeout_ms": strconv.FormatInt(ms, 10),
		"lock_timeout_ms":      strconv.FormatInt(MigratorLockTimeout.Milliseconds(), 10),
	})
}

func (s *migratorSession) pid() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backend
}

// run is the migration, golang-migrate's lock taken and released inside.
func (s *migratorSession) run(src source.Driver, fn func(*migrate.Migrate) error) (r migrated) {
	defer func() {
		if p := recover(); p != nil {
			r = migrated{err: fmt.Errorf("the migration panicked: %v", p)}
		}
	}()
	drv, err := pgxmigrate.WithInstance(s.db, &pgxmigrate.Config{})
	if err != nil {
		_ = src.Close()
		return migrated{err: fmt.Errorf("prepare migrations: %w", err)}
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", &versionInMigration{Driver: drv})
	if err != nil {
		_ = drv.Close()
		_ = src.Close()
		return migrated{err: fmt.Errorf("prepare migrations: %w", err)}
	}
	defer m.Close()
	if err := fn(m); err != nil {
		return migrated{err: err}
	}
	v, _, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return migrated{}
	}
	return migrated{version: v, err: err}
}

// close closes the session once its migration is over. golang-migrate closes what it opened,
// but not a connection its WithInstance reserved before failing (on a lock wait, say), which
// would stay open for as long as the Lambda environment lives.
func (s *migratorSession) close() {
	_ = s.db.Close()
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
}

// end ends a migration given up on. Closing its connection ends an idle session at once and
// fails whatever golang-migrate waits for on it; a session busy with a statement only notices
// when it next talks to the client, so another session terminates it, and waits until it is
// gone: then its transaction has rolled back and its lock is free.
func (s *migratorSession) end(ctx context.Context, pool *pgxpool.Pool, done <-chan migrated) error {
	limit, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionEndWait)
	defer cancel()
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		_ = conn.PgConn().Conn().Close()
	}
	var ended bool
	err := endMigratorSession.queryRow(limit, pool, s.pid(), terminateWait.Milliseconds()).Scan(&ended)
	if err == nil && !ended {
		err = fmt.Errorf("the session was still there %s after it was told to end", terminateWait)
	}
	select {
	case <-done:
		s.close()
	case <-limit.Done():
	}
	return &MigrationTimeoutError{Ended: err == nil, Err: err}
}

// versionInMigration writes the schema's version in the transaction of the migration it
// records. golang-migrate marks the version dirty, runs the file, then marks it clean, each in
// a transaction of its own; so a migration that fails or is cut short — which, each file being
// one transaction, changed nothing — would leave the schema marked dirty: golang-migrate
// refuses to migrate a dirty schema again, and the serving functions refuse to start on one
// (startup.CheckSchema), including every cold start while a long migration runs. Here the
// version moves with the file's own commit, and the schema is never marked dirty.
//
// The file and the version are one transaction because golang-migrate sends a file as one
// simple query, which PostgreSQL runs as one transaction unless the file has BEGIN and COMMIT
// of its own (0001 only, on an empty database: there the version follows its COMMIT at once).
type versionInMigration struct {
	database.Driver
	pending int  // the version golang-migrate marked dirty, and runs the file of next
	written bool // pending was written with its file
}

func (d *versionInMigration) SetVersion(version int, dirty bool) error {
	if dirty {
		d.pending, d.written = version, false
		return nil
	}
	if d.written && version == d.pending {
		return nil
	}
	return d.Driver.SetVersion(version, false)
}

func (d *versionInMigration) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	// DELETE, not golang-migrate's TRUNCATE: a row lock, so a function starting meanwhile
	// reads the version before this migration instead of waiting for it to commit.
	record := "\n;\nDELETE FROM schema_migrations"
	if d.pending >= 0 {
		record += fmt.Sprintf(";\nINSERT INTO schema_migrations (version, dirty) VALUES (%d, false)", d.pending)
	}
	if err := d.Driver.Run(bytes.NewReader(append(body, record...))); err != nil {
		return stepFailed(d.pending, err)
	}
	d.written = true
	return nil
}

// stepError is one migration's failure: which migration, where in its file, and why. Its text
// is short; golang-migrate's own errors carry the file's whole text, and do not unwrap.
type stepError struct {
	version, line int
	err           error
}

func stepFailed(version int, err error) error {
	e := &stepError{version: version, err: causeOf(err)}
	var pg *pgconn.PgError
	var de database.Error
	if errors.As(e.err, &pg) && pg.Position > 0 && errors.As(err, &de) {
		e.line = int(de.Line)
	}
	return e
}

func (e *stepError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("migration %d, line %d: %v", e.version, e.line, e.err)
	}
	return fmt.Sprintf("migration %d: %v", e.version, e.err)
}

func (e *stepError) Unwrap() error { return e.err }

// causeOf is err with golang-migrate's database.Error, which holds the query it ran, replaced
// by what it says and the error underneath.
func causeOf(err error) error {
	var de database.Error
	var dp *database.Error
	switch {
	case errors.As(err, &dp) && dp != nil:
		de = *dp
	case !errors.As(err, &de):
		return err
	}
	if de.OrigErr == nil {
		return errors.New(de.Err)
	}
	if de.Err == "" || de.Err == "migration failed" || bytes.HasPrefix([]byte(de.Err), []byte("migration failed:")) {
		return de.OrigErr
	}
	return fmt.Errorf("%s: %w", de.Err, de.OrigErr)
}

// lockWait is a lock the migrator's session was seen waiting for.
type lockWait struct{ kind, relation, mode, holders string }

// lockWatch looks, every lockWatchEvery, at what the migrator's session waits for.
type lockWatch struct {
	stopped, finished chan struct{}
	mu                sync.Mutex
	last              lockWait
}

func watchLockWaits(pool *pgxpool.Pool, pid func() int32) *lockWatch {
	w := &lockWatch{stopped: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		tick := time.NewTicker(lockWatchEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stopped:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			var l lockWait
			if migratorLockWait.queryRow(ctx, pool, pid()).Scan(&l.kind, &l.relation, &l.mode, &l.holders) == nil {
				w.mu.Lock()
				// A look that found the same wait but not who holds it (the holder's row not in
				// that snapshot of pg_stat_activity) keeps the holders an earlier look named.
				if l.holders == "" && l.kind == w.last.kind && l.relation == w.last.relation {
					l.holders = w.last.holders
				}
				w.last = l
				w.mu.Unlock()
			}
			cancel()
		}
	}()
	return w
}

// stop ends the watch and returns the last wait it saw.
func (w *lockWatch) stop() lockWait {
	close(w.stopped)
	<-w.finished
	return w.last
}

// rowOf finds the table in the context PostgreSQL gives a wait for a row lock.
var rowOf = regexp.MustCompile(`in relation "([^"]+)"`)

// what names the lock waited for, and who held it, as well as is known.
func (l lockWait) what(where string) string {
	var what string
	row := rowOf.FindStringSubmatch(where)
	switch {
	case l.kind == "advisory":
		what = "the migration lock (golang-migrate's advisory lock: another migration is running)"
	case l.kind == "relation" && l.relation != "":
		what = fmt.Sprintf("%s on %s", l.mode, l.relation)
	case row != nil:
		what = "a row of " + row[1]
	case l.relation != "":
		what = fmt.Sprintf("%s on %s", l.mode, l.relation)
	case l.kind != "":
		what = "a " + l.kind + " lock"
	default:
		what = "a lock"
	}
	if l.holders != "" {
		what += ", held by " + l.holders
	}
	return what
}

// explain is a migration's error as Migrate returns it: short, naming the migration, and for
// a lock wait that ran out, the lock.
func explain(err error, wait lockWait) error {
	if err == nil {
		return nil
	}
	var step *stepError
	if !errors.As(err, &step) {
		err = causeOf(err)
	}
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return fmt.Errorf("store: the schema is marked dirty at version %d, by a migration that stopped part-way under an earlier migrate function: "+
			"see what it applied, then set schema_migrations by hand", dirty.Version)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "55P03" { // lock_not_available: lock_timeout
		who := "the migrator"
		if step != nil {
			who = fmt.Sprintf("migration %d", step.version)
		}
		return fmt.Errorf("store: %s waited %s (its lock_timeout) for %s, and gave up: %w", who, MigratorLockTimeout, wait.what(pg.Where), pg)
	}
	if step != nil {
		return fmt.Errorf("store: %w", err)
	}
	return fmt.Errorf("store: migrate: %w", err)
}

// SchemaVersion is the version the database's schema is at (0 for none) and whether a failed
// migration left it dirty.
func (s *Store) SchemaVersion(ctx context.Context) (version uint, dirty bool, err error) {
	err = schemaVersionStmt.queryRow(ctx, s.pool).Scan(&version, &dirty)
	const undefinedTable = "42P01" // never migrated
	if errors.Is(err, ErrNotFound) || pgCode(err) == undefinedTable {
		return 0, false, nil
	}
	return version, dirty, err
}

var schemaVersionStmt = stmt("schema_version")

// Migrate applies the migrations this build has and the database lacks, and grants app what
// serving needs (the migrate function's work), on a session of its own with the store's
// connection settings.
func (s *Store) Migrate(ctx context.Context, app AppRole) (uint, error) {
	return Migrate(ctx, s.pool, app)
}

// MigrateFrom is Migrate with the migrations of fsys (tests).
func (s *Store) MigrateFrom(ctx context.Context, fsys fs.FS, app AppRole) (uint, error) {
	return MigrateFrom(ctx, s.pool, fsys, app)
}

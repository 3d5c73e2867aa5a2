package localpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"mediator/shared/config"
	"mediator/shared/store"
)

// Roles are the two logins Mediator's functions use (DESIGN.md, "Who may do what"): the
// migrator, the migrate function's, which owns the schema; and the application role, every
// other function's, which reads and writes rows and changes no schema. Roles are the
// cluster's, not a database's: made once per cluster, they serve each of its databases — the
// dev database, every test's.
type Roles struct {
	Migrator string // DB_MIGRATOR_USER, DefaultMigrator unless set
	App      string // DB_APP_USER, config.DefaultAppUser unless set (the migrate function reads it too)
}

// DefaultMigrator is the migrator's name unless DB_MIGRATOR_USER says otherwise. Deployed, the
// migrator is whoever the migrate function logs in as (the database stack's master login).
const DefaultMigrator = "mediator_migrator"

var rolePattern = regexp.MustCompile(config.RolePattern)

// RolesFromEnv are the roles' names as this process's environment gives them.
func RolesFromEnv() (Roles, error) {
	r := Roles{Migrator: DefaultMigrator, App: config.DefaultAppUser}
	for name, v := range map[string]*string{"DB_MIGRATOR_USER": &r.Migrator, "DB_APP_USER": &r.App} {
		if got := os.Getenv(name); got != "" {
			if !rolePattern.MatchString(got) {
				return r, fmt.Errorf("localpg: %s must be a role name (%s), got %q", name, config.RolePattern, got)
			}
			*v = got
		}
	}
	if r.Migrator == r.App {
		return r, fmt.Errorf("localpg: DB_MIGRATOR_USER and DB_APP_USER are both %q: the functions need a role apart from the schema's owner", r.App)
	}
	return r, nil
}

// EnsureRoles creates, as the server's administrative login, those of the roles the cluster
// lacks: plain logins, which the migration grants what each needs. They are given the
// administrative URL's password, so they log in wherever it does: the local cluster asks
// none (it trusts 127.0.0.1); a DATABASE_URL server asks the URL's. Concurrent callers
// (parallel test binaries) are safe: store.CreateRole takes a role made meanwhile as made.
func (s *Server) EnsureRoles(ctx context.Context, r Roles) error {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	password := ""
	if u, err := url.Parse(s.URL); err == nil && u.User != nil {
		password, _ = u.User.Password()
	}
	for _, name := range []string{r.Migrator, r.App} {
		if _, err := store.CreateRole(ctx, conn, name, password); err != nil {
			var pg *pgconn.PgError
			if errors.As(err, &pg) && pg.Code == "42501" { // insufficient_privilege
				return fmt.Errorf("localpg: the role %s does not exist, and %s may not create it: give that user CREATEROLE, or create the roles %s and %s yourself, logging in with the URL's password (CREATE ROLE %s LOGIN PASSWORD '…')",
					name, s.who(), r.Migrator, r.App, name)
			}
			return fmt.Errorf("localpg: create the role %s: %w", name, err)
		}
	}
	return nil
}

// who names the administrative login in a message.
func (s *Server) who() string {
	if s.External {
		return "DATABASE_URL's user"
	}
	return "the local cluster's superuser"
}

// PrepareDatabase readies the database dbURL names (as the administrative login) for the
// roles: only the migrator may create objects in its schema public — PUBLIC may, before
// PostgreSQL 15, and the application role must not — and, on the local cluster, whatever an
// earlier `make dev` migrated there as the superuser is handed to the migrator, which must own
// it to migrate it further and to grant it. A database of DATABASE_URL's is not Mediator's
// alone, so nothing in it changes owner: the migration names what the migrator does not own.
// Last, each role logs in to it, so a login the server refuses fails here, by name.
func (s *Server) PrepareDatabase(ctx context.Context, dbURL string, r Roles) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	m := pgx.Identifier{r.Migrator}.Sanitize()
	for _, sql := range []string{
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE, CREATE ON SCHEMA public TO " + m,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("localpg: %s: %w", sql, err)
		}
	}
	// A GRANT by a login that may not give it only warns: ask what it achieved.
	var creates bool
	if err := conn.QueryRow(ctx, `SELECT has_schema_privilege($1::text, 'public', 'CREATE')`, r.Migrator).Scan(&creates); err != nil {
		return err
	}
	if !creates {
		return fmt.Errorf("localpg: %s may not let %s create objects in schema public of %s: it must own the schema (from PostgreSQL 15, own the database), or the owner runs GRANT USAGE, CREATE ON SCHEMA public TO %s",
			s.who(), r.Migrator, conn.Config().Database, m)
	}
	if !s.External {
		if err := handOver(ctx, conn, r.Migrator); err != nil {
			return err
		}
	}
	for _, role := range []string{r.Migrator, r.App} {
		c, err := pgx.Connect(ctx, As(dbURL, role))
		if err != nil {
			return fmt.Errorf("localpg: log in as %s (the roles log in with the administrative URL's password): %w", role, err)
		}
		c.Close(ctx)
	}
	return nil
}

// handOver makes the migrator the owner of every object of schema public, but an extension's.
// A sequence that belongs to a column (identity, serial) follows its table.
func handOver(ctx context.Context, conn *pgx.Conn, migrator string) error {
	rows, err := conn.Query(ctx, `
		WITH m AS (SELECT oid FROM pg_roles WHERE rolname = $1::text)
		SELECT format('ALTER %s %s OWNER TO %I', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
				WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, c.oid::regclass, $1::text)
		FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
			AND c.relowner <> (SELECT oid FROM m)
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
				AND (d.deptype = 'e' OR (c.relkind = 'S' AND d.deptype IN ('a', 'i'))))
		UNION ALL
		SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, $1::text)
		FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> (SELECT oid FROM m)
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
		UNION ALL
		SELECT format('ALTER DOMAIN %s OWNER TO %I', t.oid::regtype, $1::text)
		FROM pg_type t
		WHERE t.typnamespace = 'public'::regnamespace AND t.typtype = 'd' AND t.typowner <> (SELECT oid FROM m)
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')`, migrator)
	if err != nil {
		return err
	}
	statements, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, sql := range statements {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("localpg: %s: %w", sql, err)
		}
	}
	return nil
}

// As is dbURL logging in as role instead: the same server, database, password and options.
func As(dbURL, role string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	if password, ok := u.User.Password(); ok {
		u.User = url.UserPassword(role, password)
	} else {
		u.User = url.User(role)
	}
	return u.String()
}

package store

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Two database roles serve Mediator (DESIGN.md, "Who may do what"): the migrator, whoever
// runs Migrate, which owns every object of the schema; and the application role, every other
// function's login, which may read and write rows and may not create, alter, drop or truncate
// anything. A bug or an injection in a serving path then cannot change the schema.
//
// The statements here write role names into their text, quoted as identifiers (pgx.Identifier):
// a utility statement such as GRANT or CREATE ROLE takes no parameters.

// AppRole is the application role as Migrate sets it up.
type AppRole struct {
	Name string
	// Password, when set, is the role's own: Migrate creates the role with it when the role
	// does not exist, and sets it when it does. Deployed, it is the application secret's,
	// which RDS Proxy logs in with, so the database must hold the same. Empty, the role must
	// exist already: make dev and the tests create it once per cluster (localdev/localpg).
	Password string
}

// CreateRole creates name, a role that may log in and do nothing else until granted, with
// password ("" for none), unless a role of that name exists; it says whether it created it.
// The existing role is looked for first, so a login without CREATEROLE finds roles an
// administrator made (CREATE ROLE would refuse it even for a role that exists). Roles are the
// cluster's, not a database's, so processes that start together (parallel test binaries)
// create the same one at once: the loser's duplicate_object, or the unique violation on
// pg_authid that two CREATE ROLEs past each other's check may raise, mean it exists. (Inside a
// transaction the loser's is aborted all the same; grantApp's lock keeps migrates from racing
// there.)
func CreateRole(ctx context.Context, q querier, name, password string) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, name).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		return false, nil
	}
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " LOGIN"
	if password != "" {
		clause, err := passwordClause(password)
		if err != nil {
			return false, err
		}
		sql += clause
	}
	_, err := q.Exec(ctx, sql)
	switch pgCode(err) {
	case "":
		return true, nil
	case "42710", "23505": // duplicate_object, unique_violation
		return false, nil
	}
	return false, err
}

// passwordClause is " PASSWORD '<verifier>'": SCRAM-SHA-256's stored form of password,
// computed here, so that the password itself never reaches the server, whose log would write
// it down (log_statement = 'ddl', or the STATEMENT line of an error). PostgreSQL stores a
// verifier as it is given. It normalises a password (SASLprep) before hashing it, which leaves
// ASCII as it is; a password with anything else is sent as it is, for the server to hash the
// way it will check it.
func passwordClause(password string) (string, error) {
	for i := 0; i < len(password); i++ {
		if password[i] >= 0x80 {
			return " PASSWORD " + quote(password), nil
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	v, err := scramVerifier(password, salt)
	return " PASSWORD " + quote(v), err
}

// scramVerifier is what PostgreSQL stores for a SCRAM-SHA-256 password (RFC 5802, RFC 7677):
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, at PostgreSQL's default of 4096
// iterations.
func scramVerifier(password string, salt []byte) (string, error) {
	const iterations = 4096
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(msg string) []byte {
		h := hmac.New(sha256.New, salted)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac("Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac("Server Key"))), nil
}

// What the application role holds on each kind of object, and nothing more. The migration
// version is the migrator's to write: the application role only reads it, to refuse a schema
// behind its build.
var (
	appTablePrivileges   = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	appVersionPrivileges = []string{"SELECT"}
	appSequencePrivilege = []string{"USAGE"}
	appRoutinePrivilege  = []string{"EXECUTE"}
)

// versionTable is golang-migrate's table of the schema version.
const versionTable = "schema_migrations"

// grantApp is the last step of every Migrate: it makes the application role's privileges on
// the schema exactly appTablePrivileges on every table, USAGE on every sequence and EXECUTE on
// every routine, as the migrator, in one transaction. It revokes whatever the role held before
// granting, and reads the result back from the catalog, failing on any object the role holds
// more or less on — one the migrator does not own, whose grants it cannot give, included.
//
// That is why the grants are this step and not a migration of GRANTs with ALTER DEFAULT
// PRIVILEGES: a migration runs once, so it names the role as it was then and covers only what
// its author listed and what the migrator creates after it; a table made by another role, a
// grant an operator added by hand, or a renamed application role would drift from it unseen.
// This step runs on every migrate, at every deploy, whether or not a migration was applied, and
// derives the grants from the schema as it is. A trigger function runs with the rights of the
// statement that fired it (none is SECURITY DEFINER), so the table privileges cover what the
// triggers do too.
func grantApp(ctx context.Context, pool *pgxpool.Pool, app AppRole) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Two migrates granting at once would update the same catalog rows and one fail with
		// "tuple concurrently updated": the second waits here instead (at most lock_timeout,
		// then fails whole, to be run again). The lock conflicts with itself and with
		// golang-migrate's writes of the version, not with reading it.
		if _, err := tx.Exec(ctx, `LOCK TABLE `+versionTable+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("store: lock %s: %w", versionTable, err)
		}
		if err := ensureApp(ctx, tx, app); err != nil {
			return err
		}
		if err := checkAppRole(ctx, tx, app.Name); err != nil {
			return err
		}
		if err := checkOwned(ctx, tx, app.Name); err != nil {
			return err
		}
		for _, sql := range AppGrants(app.Name) {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("store: grant to the application role: %w", err)
			}
		}
		return checkGrants(ctx, tx, app.Name)
	})
}

// AppGrants are the statements grantApp runs: revoke whatever the application role app holds
// in the schema, then grant it what serving needs. (The test harness names its migrated
// template by them too, so a change here builds a new one.)
func AppGrants(app string) []string {
	a := pgx.Identifier{app}.Sanitize()
	return []string{
		"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM " + a,
		"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM " + a,
		"REVOKE ALL ON ALL ROUTINES IN SCHEMA public FROM " + a,
		"GRANT " + strings.Join(appTablePrivileges, ", ") + " ON ALL TABLES IN SCHEMA public TO " + a,
		"REVOKE ALL ON " + versionTable + " FROM " + a,
		"GRANT " + strings.Join(appVersionPrivileges, ", ") + " ON " + versionTable + " TO " + a,
		"GRANT " + strings.Join(appSequencePrivilege, ", ") + " ON ALL SEQUENCES IN SCHEMA public TO " + a,
		"GRANT " + strings.Join(appRoutinePrivilege, ", ") + " ON ALL ROUTINES IN SCHEMA public TO " + a,
	}
}

// ensureApp creates the application role from its password, or sets the password of the one
// that exists, so that the role logs in with what its secret says. Without a password it does
// nothing: the role must exist (checkAppRole says so if it does not).
func ensureApp(ctx context.Context, tx pgx.Tx, app AppRole) error {
	if app.Password == "" {
		return nil
	}
	created, err := CreateRole(ctx, tx, app.Name, app.Password)
	if err == nil && !created {
		var clause string
		if clause, err = passwordClause(app.Password); err == nil {
			_, err = tx.Exec(ctx, "ALTER ROLE "+pgx.Identifier{app.Name}.Sanitize()+clause)
		}
	}
	if pgCode(err) == "42501" { // insufficient_privilege
		return fmt.Errorf("store: the migrator may not create the application role %q or set its password: it needs CREATEROLE (and, from PostgreSQL 16, to have created the role), or an administrator creates the role", app.Name)
	}
	if err != nil {
		return fmt.Errorf("store: the application role %q: %w", app.Name, err)
	}
	return nil
}

// checkAppRole refuses an application role that could change the schema whatever it is
// granted: one that is the migrator or may act as it (it would own everything), a superuser,
// or one that may create roles or databases.
func checkAppRole(ctx context.Context, tx pgx.Tx, name string) error {
	var super, createRole, createDB, migrator bool
	err := tx.QueryRow(ctx, `SELECT rolsuper, rolcreaterole, rolcreatedb, pg_has_role(oid, current_user, 'MEMBER')
		FROM pg_roles WHERE rolname = $1`, name).Scan(&super, &createRole, &createDB, &migrator)
	switch {
	case err == pgx.ErrNoRows:
		return fmt.Errorf("store: the application role %q does not exist: give the migrate function its secret (DB_APP_SECRET_ARN), from which it creates it, or create it (CREATE ROLE %s LOGIN)", name, pgx.Identifier{name}.Sanitize())
	case err != nil:
		return fmt.Errorf("store: read the application role: %w", err)
	case migrator:
		return fmt.Errorf("store: the application role %q is the migrator, or a member of it: it would own the schema; give the functions a role of their own (DB_APP_USER)", name)
	case super || createRole || createDB:
		return fmt.Errorf("store: the application role %q is a superuser or may create roles or databases: it must be a plain login (ALTER ROLE %s NOSUPERUSER NOCREATEROLE NOCREATEDB)", name, pgx.Identifier{name}.Sanitize())
	}
	return nil
}

// schemaObject is an object of schema public as grantApp sees it: what the application role
// holds on it, and whether the migrator owns it.
type schemaObject struct {
	kind, name, owner string
	owned             bool
	has               []string
}

// schemaObjects reads every table, sequence and routine of schema public, and the schema and
// the database themselves, with what role app holds on each. Objects of extensions are not
// Mediator's, and are left out.
func schemaObjects(ctx context.Context, tx pgx.Tx, app string) ([]schemaObject, error) {
	rows, err := tx.Query(ctx, `
		WITH migrator AS (SELECT oid FROM pg_roles WHERE rolname = current_user)
		SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END, c.relname::text,
			pg_get_userbyid(c.relowner)::text, c.relowner = (SELECT oid FROM migrator),
			ARRAY(SELECT p FROM unnest(CASE WHEN c.relkind = 'S' THEN ARRAY['USAGE', 'SELECT', 'UPDATE']
				ELSE ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] END) p
				WHERE CASE WHEN c.relkind = 'S' THEN has_sequence_privilege($1::text, c.oid, p) ELSE has_table_privilege($1::text, c.oid, p) END)
		FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		UNION ALL
		SELECT 'routine', p.oid::regprocedure::text, pg_get_userbyid(p.proowner)::text, p.proowner = (SELECT oid FROM migrator),
			ARRAY(SELECT 'EXECUTE' WHERE has_function_privilege($1::text, p.oid, 'EXECUTE'))
		FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
		UNION ALL
		SELECT 'schema', 'public', '', true,
			ARRAY(SELECT p FROM unnest(ARRAY['USAGE', 'CREATE']) p WHERE has_schema_privilege($1::text, 'public', p))
		UNION ALL
		SELECT 'database', current_database()::text, '', true,
			ARRAY(SELECT 'CREATE' WHERE has_database_privilege($1::text, current_database(), 'CREATE'))`, app)
	if err != nil {
		return nil, fmt.Errorf("store: read what the application role holds: %w", err)
	}
	objects, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schemaObject, error) {
		var o schemaObject
		err := r.Scan(&o.kind, &o.name, &o.owner, &o.owned, &o.has)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: read what the application role holds: %w", err)
	}
	return objects, nil
}

// checkOwned refuses a schema with an object the migrator does not own: its grants cannot
// reach it (PostgreSQL refuses, or only warns of a grant it could not give), and a request
// would fail on it later instead.
func checkOwned(ctx context.Context, tx pgx.Tx, app string) error {
	objects, err := schemaObjects(ctx, tx, app)
	if err != nil {
		return err
	}
	var foreign []string
	for _, o := range objects {
		if !o.owned {
			foreign = append(foreign, fmt.Sprintf("%s %s is owned by %s", o.kind, o.name, o.owner))
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("store: the migrator must own every object of schema public, to grant the application role what it needs: %s (ALTER ... OWNER TO the migrator)",
			strings.Join(foreign, "; "))
	}
	return nil
}

// checkGrants reads back what the application role holds once granted, and fails, naming each
// object, on anything but what grantApp means: a privilege PUBLIC holds included.
func checkGrants(ctx context.Context, tx pgx.Tx, app string) error {
	objects, err := schemaObjects(ctx, tx, app)
	if err != nil {
		return err
	}
	// On the schema: its objects by name (search_path), and nothing created in it; on the
	// database: no schema created in it.
	want := map[string][]string{"schema": {"USAGE"}, "database": nil,
		"table": appTablePrivileges, "sequence": appSequencePrivilege, "routine": appRoutinePrivilege}
	var wrong []string
	for _, o := range objects {
		w := want[o.kind]
		if o.kind == "table" && o.name == versionTable {
			w = appVersionPrivileges
		}
		if !sameSet(o.has, w) {
			wrong = append(wrong, fmt.Sprintf("on %s %s it holds [%s], not [%s]", o.kind, o.name, strings.Join(o.has, " "), strings.Join(w, " ")))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("store: the application role %q would hold other privileges than serving needs: %s (PUBLIC may not CREATE in schema public: REVOKE CREATE ON SCHEMA public FROM PUBLIC)",
			app, strings.Join(wrong, "; "))
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

package store_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"mediator/localdev/testdb"
	"mediator/shared/store"
)

func connect(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Connect(context.Background(), store.PoolParams{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// denied says err is PostgreSQL's insufficient_privilege.
func denied(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "42501"
}

// privileges are what role holds on table, by has_table_privilege.
func privileges(t *testing.T, pool *pgxpool.Pool, role, table string) []string {
	t.Helper()
	var has []string
	if err := pool.QueryRow(context.Background(), `SELECT ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
		WHERE has_table_privilege($1::text, $2::text, p))`, role, table).Scan(&has); err != nil {
		t.Fatal(err)
	}
	return has
}

// The grants follow the schema as it is at each migrate, not as a migration once listed it: a
// table the migrator made since is granted to the application role, and a privilege added by
// hand is taken back, by a migrate that applies no migration at all.
func TestEveryMigrateGrantsTheSchemaAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.URL(t)
	migrator := connect(t, url)
	app := testdb.Roles().App
	if _, err := migrator.Exec(ctx, `CREATE TABLE later (x int); GRANT TRUNCATE ON runs TO `+pgx.Identifier{app}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if got := privileges(t, migrator, app, "later"); len(got) != 0 {
		t.Fatalf("before the migrate the application role holds %v on a new table", got)
	}
	if _, err := store.Migrate(ctx, migrator, store.AppRole{Name: app}); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]string{
		"later": "SELECT INSERT UPDATE DELETE", "runs": "SELECT INSERT UPDATE DELETE", "schema_migrations": "SELECT",
	} {
		if got := strings.Join(privileges(t, migrator, app, table), " "); got != want {
			t.Errorf("after the migrate the application role holds [%s] on %s, want [%s]", got, table, want)
		}
	}
	// And as the role itself: it writes the new table's rows, and may not empty another.
	as := connect(t, testdb.App(url))
	if _, err := as.Exec(ctx, `INSERT INTO later VALUES (1)`); err != nil {
		t.Errorf("the application role writes a table granted at the last migrate: %v", err)
	}
	if _, err := as.Exec(ctx, `TRUNCATE runs CASCADE`); !denied(err) {
		t.Errorf("TRUNCATE by the application role, after the migrate took the privilege back: %v", err)
	}
}

// No routine of the schema runs with its owner's rights: the grants' reasoning (grantApp)
// rests on every trigger running with those of the statement that fired it. A SECURITY DEFINER
// routine would let the application role run what only the migrator may.
func TestNoRoutineRunsAsTheMigrator(t *testing.T) {
	t.Parallel()
	var definers []string
	if err := connect(t, testdb.URL(t)).QueryRow(context.Background(), `SELECT ARRAY(SELECT oid::regprocedure::text FROM pg_proc
		WHERE pronamespace = 'public'::regnamespace AND prosecdef)`).Scan(&definers); err != nil {
		t.Fatal(err)
	}
	if len(definers) > 0 {
		t.Errorf("SECURITY DEFINER routines: %v", definers)
	}
}

// A migrate stops, naming the object, where its grants cannot reach: an object the migrator
// does not own (PostgreSQL only warns of a grant it could not give), or a schema PUBLIC may
// create in. A request would otherwise fail later, on the object nobody granted.
func TestMigrateRefusesWhatItCannotGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, sql := range map[string]string{
		"a table another role owns":     `CREATE TABLE elsewhere (x int)`,
		"a schema PUBLIC may create in": `GRANT CREATE ON SCHEMA public TO PUBLIC`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := testdb.URL(t)
			if _, err := connect(t, testdb.Admin(url)).Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
			_, err := store.Migrate(ctx, connect(t, url), store.AppRole{Name: testdb.Roles().App})
			want := "table elsewhere is owned by"
			if strings.Contains(sql, "SCHEMA") {
				want = "on schema public it holds [USAGE CREATE]"
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("migrate: %v; want an error with %q", err, want)
			}
		})
	}
}

// The application role must be a role of its own, and a plain one: the migrator as the
// application role would own the schema it serves, and a role that does not exist is named.
func TestMigrateRefusesAnApplicationRoleThatIsNoneOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	migrator := connect(t, testdb.URL(t))
	for role, want := range map[string]string{
		testdb.Roles().Migrator: "is the migrator",
		"mediator_nobody":       `"mediator_nobody" does not exist`,
	} {
		if _, err := store.Migrate(ctx, migrator, store.AppRole{Name: role}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("migrate granting to %s: %v; want %q", role, err, want)
		}
	}
	// Without CREATEROLE, given a password, it cannot create the role, and says what it needs.
	if _, err := store.Migrate(ctx, migrator, store.AppRole{Name: "mediator_nobody", Password: "pw-of-a-secret"}); err == nil ||
		!strings.Contains(err.Error(), "CREATEROLE") || strings.Contains(err.Error(), "pw-of-a-secret") {
		t.Errorf("migrate creating a role without CREATEROLE: %v; want it to name CREATEROLE, never the password", err)
	}
}

// The deploy's path: the migrator (the master login, which may create roles) makes the
// application role from its secret's password on the first migrate and sets the password on
// each one after, storing only SCRAM verifiers, never the password.
func TestMigrateCreatesTheApplicationRoleFromItsSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The cluster's superuser stands in for the master login: a database migrated by it alone.
	admin := connect(t, testdb.Admin(testdb.URL(t)))
	if _, err := store.MigrateDown(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `DROP TABLE schema_migrations`); err != nil {
		t.Fatal(err)
	}
	role := "mediator_app_" + rand.Text()[:10]
	role = strings.ToLower(role)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE IF EXISTS `+role)
	})
	var verifiers []string
	for _, password := range []string{"first-password", "rotated-password"} {
		if _, err := store.Migrate(ctx, admin, store.AppRole{Name: role, Password: password}); err != nil {
			t.Fatalf("migrate with the password %q: %v", password, err)
		}
		var verifier string
		var login bool
		if err := admin.QueryRow(ctx, `SELECT rolpassword, rolcanlogin FROM pg_authid WHERE rolname = $1`, role).Scan(&verifier, &login); err != nil {
			t.Fatal(err)
		}
		if !login || !strings.HasPrefix(verifier, "SCRAM-SHA-256$4096:") || strings.Contains(verifier, password) {
			t.Fatalf("the role logs in: %t, with the stored password %q", login, verifier)
		}
		verifiers = append(verifiers, verifier)
	}
	if verifiers[0] == verifiers[1] {
		t.Error("a second migrate with another password left the role's password as it was")
	}
	if got := strings.Join(privileges(t, admin, role, "runs"), " "); got != "SELECT INSERT UPDATE DELETE" {
		t.Errorf("the role created holds [%s] on runs", got)
	}
}

// The stored form of a password is the one a SCRAM-SHA-256 login is checked against: RFC
// 7677's exchange (user "user", password "pencil") verifies with it, as PostgreSQL verifies
// the client's proof and the client the server's signature.
func TestStoredPasswordVerifiesRFC7677sExchange(t *testing.T) {
	t.Parallel()
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	verifier, err := store.ScramVerifier("pencil", salt)
	if err != nil {
		t.Fatal(err)
	}
	// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
	head, keys, _ := strings.Cut(verifier, "$")
	params, keys, _ := strings.Cut(keys, "$")
	storedB64, serverB64, _ := strings.Cut(keys, ":")
	if head != "SCRAM-SHA-256" || params != "4096:W22ZaJ0SNY7soEsUEjb6gQ==" {
		t.Fatalf("verifier %q", verifier)
	}
	storedKey, _ := base64.StdEncoding.DecodeString(storedB64)
	serverKey, _ := base64.StdEncoding.DecodeString(serverB64)
	const authMessage = "n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	mac := func(key []byte) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(authMessage))
		return h.Sum(nil)
	}
	proof, _ := base64.StdEncoding.DecodeString("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
	clientKey := mac(storedKey)
	for i := range clientKey {
		clientKey[i] ^= proof[i]
	}
	if sum := sha256.Sum256(clientKey); !hmac.Equal(sum[:], storedKey) {
		t.Error("the client's proof does not verify against the StoredKey")
	}
	if got := base64.StdEncoding.EncodeToString(mac(serverKey)); got != "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" {
		t.Errorf("the server's signature is %s, not RFC 7677's", got)
	}
}

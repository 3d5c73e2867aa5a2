package config_test

import (
	"strings"
	"testing"
	"time"

	"mediator/shared/auth"
	"mediator/shared/config"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestDefaultsAndDerivedValues(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseTTL != 60*time.Second || c.MaxRunWidth != 16 || c.MaxBodyBytes != 262144 ||
		c.Starvation != 600*time.Second || c.NodeRetireAfter != 86400*time.Second || c.Database.MaxConns != 1 ||
		c.Database.AppUser != config.DefaultAppUser || c.Database.AppSecretARN != "" {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y", "LEASE_TTL_SECONDS": "90"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatEvery() != 30*time.Second || c.AdvertTTL() != 90*time.Second || c.CancelGrace() != 90*time.Second {
		t.Fatalf("derived from a 90s lease: heartbeat %v, advert %v, grace %v", c.HeartbeatEvery(), c.AdvertTTL(), c.CancelGrace())
	}
}

// A bad value stops start-up with one line that names the variable.
func TestBadValueNamesTheVariable(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]string{
		"LEASE_TTL_SECONDS":         {"LEASE_TTL_SECONDS": "0"},
		"MAX_RUN_WIDTH":             {"MAX_RUN_WIDTH": "wide"},
		"MAX_BODY_BYTES":            {"MAX_BODY_BYTES": "-1"},
		"STARVATION_SECONDS":        {"STARVATION_SECONDS": "1.5"},
		"NODE_RETIRE_AFTER_SECONDS": {"NODE_RETIRE_AFTER_SECONDS": "0"},
		"DB_IAM_AUTH":               {"DB_IAM_AUTH": "maybe"},
		"LOG_LEVEL":                 {"LOG_LEVEL": "loud"},
		// API Gateway passes a token's groups separated by spaces: this name could never match.
		"JWT_ADMIN_GROUP": {"JWT_ADMIN_GROUP": "mediator admins"},
		// A role name that an unquoted identifier would fold to another name, or no name at all.
		"DB_APP_USER": {"DB_APP_USER": "Mediator_App"},
	}
	for name, kv := range cases {
		kv["DATABASE_URL"] = "postgres://x/y"
		_, err := config.Load(env(kv))
		if err == nil {
			t.Errorf("%s=%q accepted", name, kv[name])
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, name) || strings.Contains(msg, "\n") {
			t.Errorf("%s: want one line naming it, got %q", name, msg)
		}
	}
	// Through RDS Proxy a timeout set here would never be sent: refused, naming it.
	for _, name := range []string{"DB_STATEMENT_TIMEOUT_MS", "DB_LOCK_TIMEOUT_MS", "DB_IDLE_IN_TX_TIMEOUT_MS"} {
		_, err := config.Load(env(map[string]string{"DB_SECRET_ARN": "arn:aws:secretsmanager:x", name: "3000"}))
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "ProxyInitQuery") {
			t.Errorf("%s through the proxy: %v", name, err)
		}
		if _, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y", name: "3000"})); err != nil {
			t.Errorf("%s on a direct connection: %v", name, err)
		}
	}
	if _, err := config.Load(env(map[string]string{"LEASE_TTL_SECONDS": "abc", "DATABASE_URL": "x"})); err == nil ||
		!strings.Contains(err.Error(), "LEASE_TTL_SECONDS") {
		t.Errorf("a non-number lease TTL: %v", err)
	}
}

// Who is an admin or a node: the IAM roles and the issuer's admin group, read as given; no group
// set names none.
func TestAuthSettings(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y",
		"IAM_ADMIN_ROLE": "mediator-admin", "IAM_NODE_ROLE": "mediator-node", "JWT_ADMIN_GROUP": " mediator-admins "}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (auth.Settings{AdminRole: "mediator-admin", NodeRole: "mediator-node", AdminGroup: "mediator-admins"}); c.Auth != want {
		t.Errorf("auth settings %+v, want %+v", c.Auth, want)
	}
	if c, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y"})); err != nil || c.Auth != (auth.Settings{}) {
		t.Errorf("unset: %+v, %v", c.Auth, err)
	}
	if _, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y", "JWT_ADMIN_GROUP": strings.Repeat("g", 129)})); err == nil {
		t.Error("a group name longer than Cognito allows was accepted")
	}
}

// The lock timeout must leave the statement timeout room: a lock wait as long as the statement
// would spend a request's whole budget on a lock another request holds.
func TestLockTimeoutBelowStatementTimeout(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.LockTimeout != 2*time.Second || c.Database.StatementTimeout != 5*time.Second {
		t.Fatalf("default timeouts: lock %v, statement %v", c.Database.LockTimeout, c.Database.StatementTimeout)
	}
	if got := c.Database.RequestDeadline(); got != 8*time.Second {
		t.Errorf("request deadline: %v, want statement + lock + 1s = 8s", got)
	}
	for _, kv := range []map[string]string{
		{"DB_LOCK_TIMEOUT_MS": "5000"},
		{"DB_LOCK_TIMEOUT_MS": "3000", "DB_STATEMENT_TIMEOUT_MS": "1000"},
	} {
		kv["DATABASE_URL"] = "postgres://x/y"
		_, err := config.Load(env(kv))
		if err == nil || !strings.Contains(err.Error(), "DB_LOCK_TIMEOUT_MS") || !strings.Contains(err.Error(), "DB_STATEMENT_TIMEOUT_MS") {
			t.Errorf("%v: %v", kv, err)
		}
	}
	if _, err := config.Load(env(map[string]string{"DATABASE_URL": "x", "DB_LOCK_TIMEOUT_MS": "200", "DB_STATEMENT_TIMEOUT_MS": "1000"})); err != nil {
		t.Errorf("200 ms under 1 s: %v", err)
	}
}

func TestDatabaseSource(t *testing.T) {
	t.Parallel()
	if _, err := config.Load(env(nil)); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("no database: %v", err)
	}
	if _, err := config.Load(env(map[string]string{"DATABASE_URL": "x", "DB_SECRET_ARN": "arn"})); err == nil {
		t.Error("two sources accepted")
	}
	if _, err := config.Load(env(map[string]string{"DB_IAM_AUTH": "true", "DB_HOST": "h"})); err == nil ||
		!strings.Contains(err.Error(), "DB_USER") {
		t.Errorf("IAM auth without user and name: %v", err)
	}
	c, err := config.Load(env(map[string]string{"DB_IAM_AUTH": "true", "DB_HOST": "h", "DB_USER": "u", "DB_NAME": "n", "AWS_REGION": "eu-west-1"}))
	if err != nil || !c.Database.IAMAuth || c.Database.Port != 5432 {
		t.Errorf("IAM auth: %+v, %v", c.Database, err)
	}
}

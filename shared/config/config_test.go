package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"math/big"
	"os"
	"path/filepath"
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
		c.Database.AppUser != config.DefaultAppUser || c.Database.AppSecretARN != "" || c.HoldExpiringLead != 600*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	if c.Logs != (config.Logs{Bucket: "", MaxBytesPerStep: 256 << 20, TailBytes: 16 << 20, Flush: 2 * time.Second}) {
		t.Fatalf("step logs' defaults: %+v", c.Logs)
	}
	c, err = config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y", "LOG_BUCKET": "mediator-logs.1",
		"LOG_MAX_BYTES_PER_STEP": "1048576", "LOG_TAIL_BYTES": "1048576", "LOG_FLUSH_SECONDS": "0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Logs != (config.Logs{Bucket: "mediator-logs.1", MaxBytesPerStep: 1 << 20, TailBytes: 1 << 20, Flush: 500 * time.Millisecond}) {
		t.Fatalf("step logs' settings: %+v", c.Logs)
	}
	// The template passes the IoT endpoint's host to both: its data plane, and its WebSocket.
	host := "abc123-ats.iot.us-east-1.amazonaws.com"
	if c, err = config.Load(env(map[string]string{"DATABASE_URL": "postgres://x/y", "IOT_DATA_ENDPOINT": host, "PUSH_URL": host})); err != nil ||
		c.Push != (config.Push{DataEndpoint: "https://" + host, URL: "wss://" + host + "/mqtt"}) {
		t.Fatalf("push from a host: %+v %v", c.Push, err)
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
		// Not a bucket name: S3 would refuse it, and a presigned URL could not name it.
		// The data plane is HTTPS; the agents' broker is MQTT over WebSocket (or TCP locally).
		"IOT_DATA_ENDPOINT":      {"IOT_DATA_ENDPOINT": "ftp://abc-ats.iot.us-east-1.amazonaws.com"},
		"PUSH_URL":               {"PUSH_URL": "https://abc-ats.iot.us-east-1.amazonaws.com/mqtt"},
		"LOG_BUCKET":             {"LOG_BUCKET": "Mediator_Logs"},
		"LOG_MAX_BYTES_PER_STEP": {"LOG_MAX_BYTES_PER_STEP": "100"},
		// Longer than the cap it is the tail of.
		"LOG_TAIL_BYTES":    {"LOG_TAIL_BYTES": "300000000"},
		"LOG_FLUSH_SECONDS": {"LOG_FLUSH_SECONDS": "0.1"},
		// Under a minute's notice is none a person could act on.
		"HOLD_EXPIRING_LEAD_SECONDS": {"HOLD_EXPIRING_LEAD_SECONDS": "30"},
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

// caPEM is a freshly made self-signed CA certificate, PEM-encoded, as a bundle file holds it.
func caPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test RDS root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func writeFile(t *testing.T, content []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// DB_SSLROOTCERT is checked at start-up: a bundle of certificates is taken, and anything that
// would fail only at the first connection — no such file, not PEM, a key where certificates
// belong — or that would be ignored — beside a DATABASE_URL, or with TLS off — stops start-up
// with one line naming it.
func TestSSLRootCert(t *testing.T) {
	t.Parallel()
	secret := map[string]string{"DB_SECRET_ARN": "arn:aws:secretsmanager:x", "DB_VIA_PROXY": "false"}
	ca := caPEM(t)
	bundle := writeFile(t, append(append([]byte{}, ca...), caPEM(t)...))
	c, err := config.Load(env(withEnv(secret, "DB_SSLROOTCERT", bundle)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Database.SSLRootCert != bundle || c.Database.SSLMode != "verify-full" {
		t.Errorf("root cert %q, mode %q", c.Database.SSLRootCert, c.Database.SSLMode)
	}
	if c, err := config.Load(env(secret)); err != nil || c.Database.SSLRootCert != "" {
		t.Errorf("unset: %q, %v", c.Database.SSLRootCert, err)
	}
	for name, kv := range map[string]map[string]string{
		"no such file": withEnv(secret, "DB_SSLROOTCERT", filepath.Join(t.TempDir(), "missing.pem")),
		"not PEM":      withEnv(secret, "DB_SSLROOTCERT", writeFile(t, []byte("not a certificate\n"))),
		"empty":        withEnv(secret, "DB_SSLROOTCERT", writeFile(t, nil)),
		"a private key": withEnv(secret, "DB_SSLROOTCERT",
			writeFile(t, append(append([]byte{}, ca...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})...))),
		"a broken certificate": withEnv(secret, "DB_SSLROOTCERT",
			writeFile(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}))),
		"beside a URL": {"DATABASE_URL": "postgres://x/y", "DB_SSLROOTCERT": bundle},
		"with TLS off": withEnv(secret, "DB_SSLROOTCERT", bundle, "DB_SSLMODE", "disable"),
	} {
		_, err := config.Load(env(kv))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "DB_SSLROOTCERT") || strings.Contains(msg, "\n") {
			t.Errorf("%s: want one line naming DB_SSLROOTCERT, got %q", name, msg)
		}
	}
}

// Whether the host is RDS Proxy is the stack's to say (DB_VIA_PROXY): set false beside the
// secret, the connection is direct, so the timeouts are the functions' own and may be set.
func TestViaProxyIsTheStacksChoice(t *testing.T) {
	t.Parallel()
	secret := map[string]string{"DB_SECRET_ARN": "arn:aws:secretsmanager:x"}
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{secret, true},
		{withEnv(secret, "DB_VIA_PROXY", "true"), true},
		{withEnv(secret, "DB_VIA_PROXY", "false"), false},
		{map[string]string{"DATABASE_URL": "postgres://x/y"}, false},
	} {
		cfg, err := config.Load(env(c.env))
		if err != nil || cfg.Database.ViaProxy != c.want {
			t.Errorf("%v: via proxy %t, %v; want %t", c.env, cfg.Database.ViaProxy, err, c.want)
		}
	}
	direct := withEnv(secret, "DB_VIA_PROXY", "false", "DB_STATEMENT_TIMEOUT_MS", "3000", "DB_LOCK_TIMEOUT_MS", "1000")
	c, err := config.Load(env(direct))
	if err != nil || c.Database.StatementTimeout != 3*time.Second || c.Database.LockTimeout != time.Second {
		t.Errorf("a direct connection's own timeouts: %+v, %v", c.Database, err)
	}
}

// withEnv is base plus more, as a new map.
func withEnv(base map[string]string, more ...string) map[string]string {
	out := maps.Clone(base)
	for i := 0; i+1 < len(more); i += 2 {
		out[more[i]] = more[i+1]
	}
	return out
}

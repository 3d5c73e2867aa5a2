// Package config reads Mediator's settings (DESIGN.md, Configuration) from the environment once, at init,
// and refuses a bad value with one line that names the variable.
package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math"
	"mediator/shared/wire"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"mediator/shared/auth"
)

// Config is every setting a function needs. Derived values are methods, never settings of
// their own, so they cannot disagree with what they derive from.
type Config struct {
	LeaseTTL        time.Duration // LEASE_TTL_SECONDS
	MaxRunWidth     int           // MAX_RUN_WIDTH
	MaxBodyBytes    int           // MAX_BODY_BYTES
	Starvation      time.Duration // STARVATION_SECONDS
	NodeRetireAfter time.Duration // NODE_RETIRE_AFTER_SECONDS
	LogLevel        slog.Level    // LOG_LEVEL
	// EventBusName is where run events are published; "" publishes nothing (they stay in
	// each run's history).
	EventBusName string // EVENT_BUS_NAME
	// RetentionDays: the reaper deletes runs that ended longer ago; 0 keeps everything.
	RetentionDays int // RUN_RETENTION_DAYS
	// MaxClientPriority is the highest priority a client may give its runs; above it only
	// admins may (0 to 100).
	MaxClientPriority int // MAX_CLIENT_PRIORITY
	// QuarantineAfter is how many consecutive infrastructure failures quarantine a node.
	QuarantineAfter int // NODE_QUARANTINE_AFTER
	// MaxHoldSeconds is the longest a hold lasts, and the furthest from now an extend moves its end.
	MaxHoldSeconds int // MAX_HOLD_SECONDS
	// HoldExpiringLead is how long before a placed hold's end the reaper warns of it (event
	// hold_expiring).
	HoldExpiringLead time.Duration // HOLD_EXPIRING_LEAD_SECONDS
	// Logs says where steps' logs are kept and how the agents upload them.
	Logs Logs
	// Auth says which callers are admins and nodes: the IAM roles (IAM_ADMIN_ROLE,
	// IAM_NODE_ROLE), which nodes sign as in every stack and people too when API Gateway
	// authorizes them by IAM, and the issuer's group of admins (JWT_ADMIN_GROUP) when it
	// authorizes them by JWT.
	Auth     auth.Settings
	Database Database
	// Push says where the hints that make nodes look now go (shared/push): both empty, or
	// either, is push off for what is empty — the agents poll at their cadence as without it.
	Push Push
	// Console is how the web console (/console/) signs people in.
	Console Console
}

// Push are the push hints' settings (DESIGN.md, Pushing work to agents).
type Push struct {
	// DataEndpoint is AWS IoT Core's data plane the handlers publish hints through
	// (https://<prefix>-ats.iot.<region>.amazonaws.com; a bare host is taken as https://<host>,
	// as the template passes it); "" sends none.
	DataEndpoint string // IOT_DATA_ENDPOINT
	// URL is what the heartbeat's answer tells agents to connect to and subscribe on
	// (wss://<prefix>-ats.iot.<region>.amazonaws.com/mqtt; a bare host is taken as
	// wss://<host>/mqtt, IoT Core's WebSocket path); "" offers none.
	URL string // PUSH_URL
}

// Console is how the web console signs people in, as GET /console/config.json tells it.
type Console struct {
	// SignIn is "token" (a bearer token pasted into a form: the local gateway's development
	// tokens), "jwt" (OAuth 2.0 authorization code with PKCE against the issuer below) or
	// "iam" (SigV4, which a browser cannot sign: the console points to the CLI).
	SignIn string // CONSOLE_SIGN_IN
	// The issuer's endpoints and the people's public app client, with the scopes it asks for
	// (JWT only).
	AuthorizeURL string // CONSOLE_AUTHORIZE_URL
	TokenURL     string // CONSOLE_TOKEN_URL
	ClientID     string // CONSOLE_CLIENT_ID
	Scopes       string // CONSOLE_SCOPES, space-separated
}

// Logs are the step logs' settings.
type Logs struct {
	// Bucket is the S3 bucket, the stack's own, that keeps steps' logs; "" keeps none (the
	// agents upload nothing, and the reader says so).
	Bucket string // LOG_BUCKET
	// MaxBytesPerStep bounds what one try of a step stores; past it the agent keeps only a
	// rolling tail of TailBytes, so the stored log reads head, a marker line, tail.
	MaxBytesPerStep int64 // LOG_MAX_BYTES_PER_STEP
	TailBytes       int64 // LOG_TAIL_BYTES
	// Flush is the longest output waits on the node before it is uploaded.
	Flush time.Duration // LOG_FLUSH_SECONDS
}

// BucketPattern is what LOG_BUCKET may be: an S3 bucket name (3 to 63 lower-case letters,
// digits, dots and hyphens, starting and ending with a letter or digit), as presigned URLs and
// template.yaml's LogBucket carry it.
const BucketPattern = `^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`

var bucketPattern = regexp.MustCompile(BucketPattern)

var (
	httpURL  = regexp.MustCompile(`^(https?://[^/\s]+(/\S*)?|[A-Za-z0-9.-]+)$`)
	pushURL  = regexp.MustCompile(`^((wss|ws|tcp)://[^/\s]+(/\S*)?|[A-Za-z0-9.-]+)$`)
	bareHost = regexp.MustCompile(`^[A-Za-z0-9.-]+$`)
)

// withScheme makes a bare host name a URL: scheme, the host, path.
func withScheme(v, scheme, path string) string {
	if bareHost.MatchString(v) {
		return scheme + v + path
	}
	return v
}

// endpointURL is an OAuth endpoint the console is sent to: http(s), no spaces or quotes (it
// goes into a Content-Security-Policy by its origin).
var endpointURL = regexp.MustCompile(`^https?://[^\s'";,]+$`)

// The step logs' bounds: a cap below a kibibyte or a tail longer than the cap would store
// nothing the reader could use, and a flush past a minute would make a running step's log a
// minute late.
const (
	minLogBytes      = 1 << 10
	maxLogBytes      = 1 << 40
	minFlushInterval = 200 * time.Millisecond
	maxFlushInterval = time.Minute
)

// AdminGroupPattern is what JWT_ADMIN_GROUP may be: a group name without spaces (Cognito's hold
// none), since API Gateway passes a token's groups to the functions separated by spaces.
// template.yaml's JwtAdminGroup allows the same, pinned by a test.
const AdminGroupPattern = `^\S{1,128}$`

var adminGroup = regexp.MustCompile(AdminGroupPattern)

// RolePattern is what a database role Mediator names may be: lower case, as an identifier an
// operator types unquoted in psql folds to (a role "Mediator_App" would answer to no unquoted
// name), within PostgreSQL's 63 bytes. The SQL quotes the name whatever it is; the pattern
// keeps it one that reads the same everywhere. infra/database.yaml's AppUser and template.yaml's
// DatabaseAppUser allow the same, pinned by tests.
const RolePattern = `^[a-z][a-z0-9_]{0,62}$`

var rolePattern = regexp.MustCompile(RolePattern)

// DefaultAppUser is the application role's name unless DB_APP_USER says otherwise.
const DefaultAppUser = "mediator_app"

// Database says where the database is and how to reach it. Exactly one of URL, SecretARN and
// IAMAuth names the credentials.
type Database struct {
	URL       string // DATABASE_URL
	SecretARN string // DB_SECRET_ARN: a Secrets Manager secret in the RDS JSON shape
	IAMAuth   bool   // DB_IAM_AUTH: a fresh RDS IAM token for every new connection
	Host      string // DB_HOST (the RDS Proxy endpoint in AWS)
	Port      int    // DB_PORT
	User      string // DB_USER
	Name      string // DB_NAME
	Region    string // AWS_REGION, for IAM tokens
	// SSLMode applies to connections built from a secret or IAM auth (a URL carries its own):
	// verify-full by default, which the RDS Proxy's certificate (issued by ACM, chained to
	// Amazon's public roots) passes with the system's CAs.
	SSLMode string // DB_SSLMODE
	// SSLRootCert is a PEM file of the CAs that verify the server instead of the system's:
	// Aurora's own endpoints are signed by the RDS CAs, which no system trust store holds, so a
	// direct connection with verify-full fails without the RDS bundle. It applies where
	// SSLMode does; checked at start-up to exist and hold certificates, so a missing bundle
	// stops the function at init rather than at its first connection.
	SSLRootCert string // DB_SSLROOTCERT

	// ViaProxy (DB_VIA_PROXY): connections go through RDS Proxy, which refuses timeouts sent
	// as startup parameters and pins a connection on a named prepared statement or a SET. The
	// default is true with DB_SECRET_ARN or DB_IAM_AUTH, false with a URL; template.yaml sets
	// it from DatabaseViaProxy, since only the stack knows whether DB_HOST is the proxy. Set
	// true on a direct connection, the functions would send no timeouts at all.
	ViaProxy bool

	// AppUser is the application role: the login of every function but migrate, which may
	// read and write rows and change no schema. The migrate function grants it exactly that
	// after every migration (shared/store, Migrate); the others ignore it.
	AppUser string // DB_APP_USER
	// AppSecretARN is the application role's own secret (RDS JSON shape). Only the migrate
	// function is given it: it creates the role with the secret's password when the role does
	// not exist, and sets that password when it does, since RDS Proxy logs in with it.
	AppSecretARN string // DB_APP_SECRET_ARN

	MaxConns         int32         // DB_MAX_CONNS: one per Lambda environment
	StatementTimeout time.Duration // DB_STATEMENT_TIMEOUT_MS
	// LockTimeout bounds every wait for a row lock, including the one a deferred constraint
	// takes at COMMIT, where statement_timeout does not reach.
	LockTimeout     time.Duration // DB_LOCK_TIMEOUT_MS
	IdleInTxTimeout time.Duration // DB_IDLE_IN_TX_TIMEOUT_MS
}

// RequestDeadline bounds one request from the wait for a pool connection to the end of its
// wake: a statement may run for StatementTimeout after waiting LockTimeout for a lock, and a
// second more covers the round trips around it. Through RDS Proxy the two timeouts are the
// proxy's ProxyInitQuery, whose default these defaults equal (a test pins them together).
func (d Database) RequestDeadline() time.Duration {
	return d.StatementTimeout + d.LockTimeout + time.Second
}

// The database timeouts' defaults, in milliseconds: what a direct connection sends, and what
// infra/database.yaml's default ProxyInitQuery sets through RDS Proxy.
const (
	DefaultStatementTimeoutMS = 5000
	DefaultLockTimeoutMS      = 2000
	DefaultIdleInTxTimeoutMS  = 10000
)

// DefaultHoldExpiringLeadSeconds is HOLD_EXPIRING_LEAD_SECONDS's default: ten minutes' notice,
// time to extend or save one's work.
const DefaultHoldExpiringLeadSeconds = 600

// HeartbeatEvery is how often a node should heartbeat: three chances per lease.
func (c Config) HeartbeatEvery() time.Duration { return c.LeaseTTL / 3 }

// AdvertTTL is how long a node's advert stays live without a heartbeat.
func (c Config) AdvertTTL() time.Duration { return c.LeaseTTL }

// CancelGrace is how long a cancel waits for nodes to acknowledge before the reaper settles it.
func (c Config) CancelGrace() time.Duration { return c.LeaseTTL }

// Load reads the settings through getenv (os.Getenv in a function, a map in a test).
func Load(getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{
		LeaseTTL:          r.seconds("LEASE_TTL_SECONDS", 60, 3, 86400),
		MaxRunWidth:       r.integer("MAX_RUN_WIDTH", 16, 1, 64),
		MaxBodyBytes:      r.integer("MAX_BODY_BYTES", 262144, 1024, 6*1024*1024),
		Starvation:        r.seconds("STARVATION_SECONDS", 600, 1, 7*86400),
		NodeRetireAfter:   r.seconds("NODE_RETIRE_AFTER_SECONDS", 86400, 60, 365*86400),
		LogLevel:          r.level("LOG_LEVEL"),
		EventBusName:      r.text("EVENT_BUS_NAME"),
		RetentionDays:     r.integer("RUN_RETENTION_DAYS", 30, 0, 3650),
		MaxClientPriority: r.integer("MAX_CLIENT_PRIORITY", 50, 0, 100),
		QuarantineAfter:   r.integer("NODE_QUARANTINE_AFTER", 3, 1, 1000),
		MaxHoldSeconds:    r.integer("MAX_HOLD_SECONDS", wire.DefaultMaxHoldSeconds, 60, wire.MaxHoldSecondsLimit),
		HoldExpiringLead:  r.seconds("HOLD_EXPIRING_LEAD_SECONDS", DefaultHoldExpiringLeadSeconds, 60, 86400),
		Logs: Logs{
			Bucket:          r.matching("LOG_BUCKET", bucketPattern, "an S3 bucket name: 3 to 63 lower-case letters, digits, dots or hyphens"),
			MaxBytesPerStep: r.bytes("LOG_MAX_BYTES_PER_STEP", 256<<20, minLogBytes, maxLogBytes),
			TailBytes:       r.bytes("LOG_TAIL_BYTES", 16<<20, minLogBytes, maxLogBytes),
			Flush:           r.decimalSeconds("LOG_FLUSH_SECONDS", 2*time.Second, minFlushInterval, maxFlushInterval),
		},
		Auth: auth.Settings{
			AdminRole:  r.text("IAM_ADMIN_ROLE"),
			NodeRole:   r.text("IAM_NODE_ROLE"),
			AdminGroup: r.matching("JWT_ADMIN_GROUP", adminGroup, "a group name: 1 to 128 characters, no spaces"),
		},
		Push: Push{
			DataEndpoint: withScheme(r.matching("IOT_DATA_ENDPOINT", httpURL, "an http(s) URL or a host name: the account's IoT data endpoint"), "https://", ""),
			URL:          withScheme(r.matching("PUSH_URL", pushURL, "a wss://, ws:// or tcp:// URL of an MQTT broker, or a host name"), "wss://", "/mqtt"),
		},
		Console: Console{
			SignIn:       r.oneOf("CONSOLE_SIGN_IN", "token", "token", "jwt", "iam"),
			AuthorizeURL: r.matching("CONSOLE_AUTHORIZE_URL", endpointURL, "an http(s) URL"),
			TokenURL:     r.matching("CONSOLE_TOKEN_URL", endpointURL, "an http(s) URL"),
			ClientID:     r.text("CONSOLE_CLIENT_ID"),
			Scopes:       r.textOr("CONSOLE_SCOPES", "openid mediator/client"),
		},
		Database: Database{
			URL:              r.text("DATABASE_URL"),
			SecretARN:        r.text("DB_SECRET_ARN"),
			IAMAuth:          r.boolean("DB_IAM_AUTH"),
			Host:             r.text("DB_HOST"),
			Port:             r.integer("DB_PORT", 5432, 1, 65535),
			User:             r.text("DB_USER"),
			Name:             r.text("DB_NAME"),
			Region:           r.text("AWS_REGION"),
			SSLMode:          r.oneOf("DB_SSLMODE", "verify-full", "disable", "require", "verify-ca", "verify-full"),
			SSLRootCert:      r.text("DB_SSLROOTCERT"),
			ViaProxy:         r.booleanOr("DB_VIA_PROXY", r.text("DATABASE_URL") == ""),
			AppUser:          r.matchingOr("DB_APP_USER", DefaultAppUser, rolePattern, "a role name: a lower-case letter, then up to 62 lower-case letters, digits or _"),
			AppSecretARN:     r.text("DB_APP_SECRET_ARN"),
			MaxConns:         int32(r.integer("DB_MAX_CONNS", 1, 1, 1000)),
			StatementTimeout: r.millis("DB_STATEMENT_TIMEOUT_MS", DefaultStatementTimeoutMS),
			LockTimeout:      r.millis("DB_LOCK_TIMEOUT_MS", DefaultLockTimeoutMS),
			IdleInTxTimeout:  r.millis("DB_IDLE_IN_TX_TIMEOUT_MS", DefaultIdleInTxTimeoutMS),
		},
	}
	if r.err != nil {
		return Config{}, r.err
	}
	// Through RDS Proxy the timeouts are the proxy's (ProxyInitQuery): a value set here would
	// be validated and then never sent, the same setting in two places that disagree silently.
	for _, name := range []string{"DB_STATEMENT_TIMEOUT_MS", "DB_LOCK_TIMEOUT_MS", "DB_IDLE_IN_TX_TIMEOUT_MS"} {
		if c.Database.ViaProxy && r.text(name) != "" {
			return Config{}, fmt.Errorf("config: %s has no effect through RDS Proxy (DB_VIA_PROXY); set it in the database stack's ProxyInitQuery", name)
		}
	}
	// A lock wait as long as the statement timeout would answer the statement timeout's error,
	// and spend the whole budget, for a lock another request holds.
	if c.Database.LockTimeout >= c.Database.StatementTimeout {
		return Config{}, fmt.Errorf("config: DB_LOCK_TIMEOUT_MS (%d) must be below DB_STATEMENT_TIMEOUT_MS (%d)",
			c.Database.LockTimeout.Milliseconds(), c.Database.StatementTimeout.Milliseconds())
	}
	if err := c.Database.check(); err != nil {
		return Config{}, err
	}
	// The tail is what is kept of the output past the cap: longer than the cap, a capped log
	// would store more than an uncapped one may.
	if c.Logs.TailBytes > c.Logs.MaxBytesPerStep {
		return Config{}, fmt.Errorf("config: LOG_TAIL_BYTES (%d) must be at most LOG_MAX_BYTES_PER_STEP (%d)", c.Logs.TailBytes, c.Logs.MaxBytesPerStep)
	}
	return c, nil
}

func (d Database) check() error {
	sources := 0
	for _, set := range []bool{d.URL != "", d.SecretARN != "", d.IAMAuth} {
		if set {
			sources++
		}
	}
	switch {
	case sources == 0:
		return fmt.Errorf("config: DATABASE_URL is not set (nor DB_SECRET_ARN, nor DB_IAM_AUTH=true with DB_HOST, DB_USER and DB_NAME)")
	case sources > 1:
		return fmt.Errorf("config: DATABASE_URL, DB_SECRET_ARN and DB_IAM_AUTH are alternatives; set only one")
	case d.IAMAuth && (d.Host == "" || d.User == "" || d.Name == "" || d.Region == ""):
		return fmt.Errorf("config: DB_IAM_AUTH=true needs DB_HOST, DB_USER, DB_NAME and AWS_REGION")
	}
	return d.checkRootCert()
}

// checkRootCert refuses a DB_SSLROOTCERT that would be ignored, or that verifies nothing: a
// path that is not there, or a file that is not PEM certificates, would otherwise surface only
// as a TLS failure at the first connection, with the setting's name nowhere in it.
func (d Database) checkRootCert() error {
	switch {
	case d.SSLRootCert == "":
		return nil
	case d.URL != "":
		return fmt.Errorf("config: DB_SSLROOTCERT applies to DB_SECRET_ARN and DB_IAM_AUTH connections; a DATABASE_URL carries its own (sslrootcert=...)")
	case d.SSLMode == "disable":
		return fmt.Errorf("config: DB_SSLROOTCERT is set, but DB_SSLMODE=disable sends no TLS for it to verify")
	}
	raw, err := os.ReadFile(d.SSLRootCert)
	if err != nil {
		return fmt.Errorf("config: DB_SSLROOTCERT: %v", err)
	}
	certs := 0
	for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("config: DB_SSLROOTCERT %s holds a PEM %q block; it must hold CA certificates only", d.SSLRootCert, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("config: DB_SSLROOTCERT %s: certificate %d does not parse: %v", d.SSLRootCert, certs+1, err)
		}
		certs++
	}
	if certs == 0 {
		return fmt.Errorf("config: DB_SSLROOTCERT %s holds no PEM certificate", d.SSLRootCert)
	}
	return nil
}

// reader keeps the first error so Load reads like a list of settings.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) text(name string) string { return strings.TrimSpace(r.getenv(name)) }

// textOr is text with a default for an unset variable.
func (r *reader) textOr(name, def string) string {
	if v := r.text(name); v != "" {
		return v
	}
	return def
}

func (r *reader) fail(name, want, got string) {
	if r.err == nil {
		r.err = fmt.Errorf("config: %s must be %s, got %q", name, want, got)
	}
}

func (r *reader) integer(name string, def, lo, hi int) int {
	raw := r.text(name)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		r.fail(name, fmt.Sprintf("a whole number from %d to %d", lo, hi), raw)
		return def
	}
	return n
}

func (r *reader) seconds(name string, def, lo, hi int) time.Duration {
	return time.Duration(r.integer(name, def, lo, hi)) * time.Second
}

// bytes is a size in bytes within [lo, hi], read as 64 bits whatever the platform's int.
func (r *reader) bytes(name string, def, lo, hi int64) int64 {
	raw := r.text(name)
	if raw == "" {
		return def
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		r.fail(name, fmt.Sprintf("a number of bytes from %d to %d", lo, hi), raw)
		return def
	}
	return n
}

// decimalSeconds is a number of seconds that may have a fraction (0.5), within [lo, hi].
func (r *reader) decimalSeconds(name string, def, lo, hi time.Duration) time.Duration {
	raw := r.text(name)
	if raw == "" {
		return def
	}
	f, err := strconv.ParseFloat(raw, 64)
	d := time.Duration(f * float64(time.Second))
	if err != nil || math.IsNaN(f) || d < lo || d > hi {
		r.fail(name, fmt.Sprintf("a number of seconds from %g to %g", lo.Seconds(), hi.Seconds()), raw)
		return def
	}
	return d
}

func (r *reader) millis(name string, def int) time.Duration {
	return time.Duration(r.integer(name, def, 100, 15*60*1000)) * time.Millisecond
}

// matching is an optional setting that, when set, matches re.
func (r *reader) matching(name string, re *regexp.Regexp, want string) string {
	raw := r.text(name)
	if raw != "" && !re.MatchString(raw) {
		r.fail(name, want, raw)
	}
	return raw
}

// matchingOr is matching with a default for an unset variable.
func (r *reader) matchingOr(name, def string, re *regexp.Regexp, want string) string {
	if v := r.matching(name, re, want); v != "" {
		return v
	}
	return def
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	raw := r.text(name)
	if raw == "" {
		return def
	}
	for _, a := range allowed {
		if raw == a {
			return raw
		}
	}
	r.fail(name, "one of "+strings.Join(allowed, ", "), raw)
	return def
}

func (r *reader) boolean(name string) bool { return r.booleanOr(name, false) }

func (r *reader) booleanOr(name string, def bool) bool {
	raw := r.text(name)
	if raw == "" {
		return def
	}
	b, err := strconv.ParseBool(raw)
	if err != nil {
		r.fail(name, "true or false", raw)
	}
	return b
}

func (r *reader) level(name string) slog.Level {
	raw := r.text(name)
	if raw == "" {
		return slog.LevelInfo
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(raw)); err != nil {
		r.fail(name, "one of debug, info, warn, error", raw)
	}
	return l
}

// Package devserver is Mediator on one machine: a PostgreSQL (a local cluster, or
// DATABASE_URL), a migrated database, the real handlers behind the local gateway on
// 127.0.0.1, and, for `make dev`, a local S3 keeping the steps' logs and a local MQTT broker
// pushing hints to the agents. `make dev`, `make migrate`, `make demo` and `make bench` all start it here.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"

	"mediator/localdev/gateway"
	"mediator/localdev/localpg"
	"mediator/localdev/mqtt"
	locals3 "mediator/localdev/s3"
	"mediator/shared/config"
	"mediator/shared/httpapi"
	"mediator/shared/publish"
	"mediator/shared/push"
	"mediator/shared/startup"
	"mediator/shared/steplogs"
	"mediator/shared/store"
	"mediator/shared/upkeep"
)

// Options choose the cluster and the database.
type Options struct {
	Cluster string // the cluster's folder under .localdev: pg-<Cluster>
	// Database is created if missing. With DATABASE_URL, the URL's own database is used as it
	// is, unless Fresh: then Database is made on that server (demos and benchmarks start
	// clean and never touch the user's data).
	Database string
	Fresh    bool // drop the database first: every start from an empty fleet
	Settings []string
	Log      *slog.Logger // the handlers' log; nil is JSON on stderr at LOG_LEVEL
	Logf     func(format string, args ...any)
	Tracer   pgx.QueryTracer
	// S3, when set, keeps the steps' logs in a local S3 (localdev/s3) — unless LOG_BUCKET is
	// set, when the functions use that bucket through the default AWS configuration, as
	// deployed.
	S3 *LocalS3
	// Push, when set, has the handlers hint the agents to look now (shared/push): through
	// IOT_DATA_ENDPOINT with PUSH_URL offered to the agents when those are set, as deployed;
	// else through a local mosquitto and IoT data plane (localdev/mqtt) on free ports.
	Push *LocalPush
}

// LocalPush is where the local broker keeps its config file and log.
type LocalPush struct {
	Dir string // "" for a temporary directory
}

// LocalS3 is where the local S3 listens and keeps its objects.
type LocalS3 struct {
	Port int    // on 127.0.0.1; 0 takes a free one
	Dir  string // objects survive restarts here; "" keeps them in memory
}

// LocalLogBucket is the local S3's bucket for steps' logs.
const LocalLogBucket = "mediator-logs"

// Stack is a running local Mediator.
type Stack struct {
	Config config.Config
	Store  *store.Store
	Log    *slog.Logger
	Base   string // http://127.0.0.1:port once Serve has started
	// AdminURL is the stack's database as the server's administrative login (DATABASE_URL's
	// user, or the local cluster's superuser): what neither role may do, such as a benchmark's
	// extensions and statistics, goes through it.
	AdminURL string
	// Database is AdminURL with its password hidden, for a banner: the local cluster's port is
	// whatever was free when it started.
	Database string
	External bool // the database is DATABASE_URL's, not the local cluster's
	// S3 is the local S3 keeping the steps' logs, when Options.S3 started one.
	S3 *locals3.Server
	// Broker and DataPlane play IoT Core, when Options.Push started them.
	Broker    *mqtt.Broker
	DataPlane *mqtt.DataPlane
	hinter    *push.Hinter
	pg        *localpg.Server
	publisher *publish.Publisher
	logs      *steplogs.Bucket
	server    *http.Server
	served    chan error
}

// Open brings up PostgreSQL, the database and its schema, and the store — everything but the
// HTTP server. As deployed, the migration runs as the migrator and the store serves as the
// application role (localpg.Roles), so what works here works with the grants a deploy gives.
// On error, Stop releases what did start.
func Open(ctx context.Context, o Options) (*Stack, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	s := &Stack{}
	dir, err := localpg.ClusterDir(o.Cluster)
	if err != nil {
		return s, err
	}
	s.pg, err = localpg.Ensure(ctx, localpg.Options{Dir: dir, Settings: o.Settings, Logf: o.Logf})
	if err != nil {
		return s, err
	}
	roles, err := localpg.RolesFromEnv()
	if err != nil {
		return s, err
	}
	if err := s.pg.EnsureRoles(ctx, roles); err != nil {
		return s, err
	}
	s.AdminURL = s.pg.URL
	if !s.pg.External || o.Fresh {
		if s.AdminURL, err = EnsureDatabase(ctx, s.pg.URL, o.Database, o.Fresh); err != nil {
			return s, err
		}
	}
	s.External = s.pg.External
	if u, err := url.Parse(s.AdminURL); err == nil {
		s.Database = u.Redacted()
	}
	if err := s.pg.PrepareDatabase(ctx, s.AdminURL, roles); err != nil {
		return s, err
	}
	if s.Config, err = LoadConfig(localpg.As(s.AdminURL, roles.App)); err != nil {
		return s, err
	}
	s.Log = o.Log
	if s.Log == nil {
		s.Log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.Config.LogLevel}))
	}
	if err := migrate(ctx, localpg.As(s.AdminURL, roles.Migrator), s.Log); err != nil {
		return s, err
	}
	if s.Store, err = startup.OpenStore(ctx, s.Config, "mediator-local", s.Log, o.Tracer); err != nil {
		return s, err
	}
	// With EVENT_BUS_NAME set, run events go wherever the SDK resolves EventBridge to
	// (AWS_ENDPOINT_URL_EVENTBRIDGE for a local stand-in).
	if s.publisher, err = startup.Publisher(ctx, s.Config, startup.NewAWS(), s.Store, s.Log); err != nil {
		return s, err
	}
	if o.S3 != nil {
		if err := s.openLogs(ctx, *o.S3); err != nil {
			return s, err
		}
	}
	if o.Push != nil {
		if err := s.openPush(ctx, *o.Push); err != nil {
			return s, err
		}
	}
	return s, nil
}

// openPush gives the handlers a Hinter: IOT_DATA_ENDPOINT's, through the default AWS
// configuration, when set; else a local broker's, whose data plane takes the local S3's
// credentials as any.
func (s *Stack) openPush(ctx context.Context, o LocalPush) error {
	var err error
	if s.Config.Push.DataEndpoint != "" {
		s.hinter, err = startup.Hinter(ctx, s.Config, startup.NewAWS(), s.Log)
		return err
	}
	if s.Broker, err = mqtt.Start(ctx, o.Dir); err != nil {
		return fmt.Errorf("the local MQTT broker: %w", err)
	}
	if s.DataPlane, err = mqtt.ServeDataPlane(s.Broker); err != nil {
		return err
	}
	s.Config.Push = config.Push{DataEndpoint: s.DataPlane.URL(), URL: s.Broker.URL()}
	s.hinter, err = push.New(s.DataPlane.URL(), locals3.DefaultRegion,
		credentials.NewStaticCredentialsProvider(locals3.DefaultAccessKeyID, locals3.DefaultSecretAccessKey, ""), s.Log)
	return err
}

// openLogs gives the functions a log bucket: LOG_BUCKET's, when set, through the default AWS
// configuration; else a local S3's, which the same code reaches as a function configured with
// AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for it would —
// passed as options, so that this one process's other clients (EventBridge's) keep theirs.
func (s *Stack) openLogs(ctx context.Context, o LocalS3) error {
	var err error
	if s.Config.Logs.Bucket != "" {
		s.logs, err = startup.LogBucket(ctx, s.Config, startup.NewAWS())
		return err
	}
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o700); err != nil {
			return err
		}
	}
	if s.S3, err = locals3.Start(context.Background(), locals3.Options{Port: o.Port, Dir: o.Dir, Buckets: []string{LocalLogBucket}}); err != nil {
		return fmt.Errorf("the local S3 on 127.0.0.1:%d (S3_PORT): %w", o.Port, err)
	}
	s.Config.Logs.Bucket = LocalLogBucket
	s.logs, err = startup.LogBucket(ctx, s.Config, startup.NewAWS(awsconfig.WithRegion(s.S3.Region()),
		awsconfig.WithBaseEndpoint(s.S3.URL()), awsconfig.WithCredentialsProvider(s.S3.Credentials())))
	return err
}

// migrate runs the migrate function's handler as the migrator, with this process's settings.
func migrate(ctx context.Context, migratorURL string, log *slog.Logger) error {
	cfg, err := LoadConfig(migratorURL)
	if err != nil {
		return err
	}
	st, err := startup.OpenStore(ctx, cfg, "mediator-local-migrate", log)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = upkeep.Migrate(startup.Deps{Store: st, Config: cfg, Log: log})(ctx, nil)
	return err
}

// LoadConfig reads every setting from this process's environment, as a function does; only
// the database and the pool size have local defaults (one process serves every function).
func LoadConfig(dbURL string) (config.Config, error) {
	return config.Load(func(name string) string {
		switch v := os.Getenv(name); {
		case name == "DATABASE_URL":
			return dbURL
		case name == "DB_MAX_CONNS" && v == "":
			return "8"
		default:
			return v
		}
	})
}

// Serve puts every function behind the local gateway on 127.0.0.1:port (0 for a free port)
// and returns once it accepts connections. jwt, when set, authorizes the people's routes as
// API Gateway's JWT authorizer does; tokens authorize the rest (gateway.Gateway).
func (s *Stack) Serve(port int, tokens *gateway.Tokens, jwt *gateway.JWTAuthorizer, extra map[string]http.HandlerFunc) error {
	gw := &gateway.Gateway{
		Routes: httpapi.Routes, Functions: httpapi.Functions(s.Deps()), Tokens: tokens, JWT: jwt, Log: s.Log, Extra: extra,
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	s.Base = "http://" + ln.Addr().String()
	if s.S3 != nil { // the console, served here, reads steps' logs from the local S3
		s.S3.AllowOrigin(s.Base)
	}
	s.server = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	s.served = make(chan error, 1)
	go func() { s.served <- s.server.Serve(ln) }()
	return nil
}

// Deps are what every handler is built from.
func (s *Stack) Deps() startup.Deps {
	return startup.Deps{Store: s.Store, Config: s.Config, Log: s.Log, Publisher: s.publisher, Logs: s.logs, Hinter: s.hinter}
}

// Wait blocks until the server stops or ctx ends.
func (s *Stack) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.served:
		s.served <- err
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// Stop shuts down whatever started, in reverse order. The PostgreSQL cluster is stopped only
// when this process started it: one found running belongs to another `make dev`, and a
// DATABASE_URL server is someone else's.
func (s *Stack) Stop() {
	if s.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.server.Shutdown(ctx)
	}
	if s.Store != nil {
		s.Store.Close()
	}
	if s.S3 != nil {
		_ = s.S3.Close()
	}
	if s.DataPlane != nil {
		s.DataPlane.Close()
	}
	if s.Broker != nil {
		s.Broker.Stop()
	}
	if s.pg != nil && s.pg.Started {
		if err := s.pg.Stop(context.Background()); err != nil && s.Log != nil {
			s.Log.Warn("stopping PostgreSQL", "error", err.Error())
		}
	}
}

// EnsureDatabase creates database name on the server of adminURL (dropping it first when
// fresh) and returns its URL, keeping the server URL's user, password and options.
func EnsureDatabase(ctx context.Context, adminURL, name string, fresh bool) (string, error) {
	dbURL, err := localpg.WithDatabase(adminURL, name)
	if err != nil {
		return "", fmt.Errorf("devserver: DATABASE_URL must be a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if fresh {
		// WITH (FORCE): a run killed halfway may have left connections behind.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return "", err
		}
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return "", err
		}
	}
	return dbURL, nil
}

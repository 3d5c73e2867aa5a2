// Package startup is what every Lambda main does before lambda.Start (Init): read the
// configuration, set up JSON logs, open the store and check the schema. Any failure prints one
// line and exits, which Lambda reports as an init error instead of serving with a bad setting.
// The migrate function alone opens inside its handler (Open), to answer CloudFormation whatever
// fails.
package startup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/jackc/pgx/v5"

	"mediator/migrations"
	"mediator/shared/config"
	"mediator/shared/dbcreds"
	"mediator/shared/publish"
	"mediator/shared/push"
	"mediator/shared/steplogs"
	"mediator/shared/store"
)

// Deps is what every function's handler is built from. It lives here, not with the HTTP
// handlers, so the functions that serve no HTTP (reap, migrate) do not link them.
type Deps struct {
	Store  *store.Store
	Config config.Config
	Log    *slog.Logger
	// Publisher sends run and node events to EventBridge; nil when EVENT_BUS_NAME is empty.
	Publisher *publish.Publisher
	// Logs is the step logs' bucket; nil when LOG_BUCKET is empty (the stack keeps no logs).
	Logs *steplogs.Bucket
	// Hinter tells nodes to look now after a commit gives them work or takes it away; nil when
	// IOT_DATA_ENDPOINT is empty (the nodes look at their cadence).
	Hinter *push.Hinter
}

// Init prepares a function that serves requests: it refuses to start when the database's
// schema is behind this build.
func Init(name string) Deps {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Open(ctx, name, os.Getenv)
	if err == nil {
		d.Publisher, err = Publisher(ctx, d.Config, d.Store, d.Log)
	}
	if err == nil {
		d.Logs, err = LogBucket(ctx, d.Config)
	}
	if err == nil {
		d.Hinter, err = Hinter(ctx, d.Config, d.Log)
	}
	if err == nil {
		err = CheckSchema(ctx, d.Store)
	}
	if err != nil {
		exit(name, err)
	}
	return d
}

// Open reads the configuration through getenv (os.Getenv in a function), sets up the JSON log
// and opens the store, which connects when first used; it publishes nothing (Init adds the
// Publisher). It returns what failed instead of exiting: the migrate function opens inside its
// handler, where a bad setting or an unreadable secret is an answer to CloudFormation, not an
// init error CloudFormation never hears of.
func Open(ctx context.Context, name string, getenv func(string) string) (Deps, error) {
	cfg, err := config.Load(getenv)
	if err != nil {
		return Deps{}, err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).With("function", name)
	slog.SetDefault(log)
	st, err := OpenStore(ctx, cfg, "mediator-"+name, log)
	if err != nil {
		return Deps{}, err
	}
	return Deps{Store: st, Config: cfg, Log: log}, nil
}

// Publisher is the events' publisher when EVENT_BUS_NAME names a bus, else nil. Its
// EventBridge client takes the default AWS configuration, endpoint included
// (AWS_ENDPOINT_URL_EVENTBRIDGE points it at a local stand-in).
func Publisher(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger) (*publish.Publisher, error) {
	if cfg.EventBusName == "" {
		return nil, nil
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("EVENT_BUS_NAME is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return publish.New(eventbridge.NewFromConfig(awsCfg), cfg.EventBusName, st, log), nil
}

// Hinter is the push hints' publisher when IOT_DATA_ENDPOINT names IoT's data plane, else nil.
// It signs with the function's own credentials, for the configuration's region; opts change
// that configuration as the environment would (make dev's local stand-in).
func Hinter(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...func(*awsconfig.LoadOptions) error) (*push.Hinter, error) {
	if cfg.Push.DataEndpoint == "" {
		return nil, nil
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("IOT_DATA_ENDPOINT is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return push.New(cfg.Push.DataEndpoint, awsCfg.Region, awsCfg.Credentials, log)
}

// LogBucket is the step logs' bucket when LOG_BUCKET names one, else nil. Its S3 client takes
// the default AWS configuration, endpoint included (AWS_ENDPOINT_URL_S3 points it at a local
// stand-in, addressed path-style), and signs the URLs it hands out with the function's own
// credentials. opts change that configuration as the environment would (make dev points a
// process serving every function at its local S3 without touching the other clients').
func LogBucket(ctx context.Context, cfg config.Config, opts ...func(*awsconfig.LoadOptions) error) (*steplogs.Bucket, error) {
	if cfg.Logs.Bucket == "" {
		return nil, nil
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("LOG_BUCKET is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return steplogs.New(steplogs.NewClient(awsCfg), cfg.Logs), nil
}

// OpenStore connects with the configured credentials and the store's settings. A tracer, if
// given, sees every statement.
func OpenStore(ctx context.Context, cfg config.Config, app string, log *slog.Logger, tracer ...pgx.QueryTracer) (*store.Store, error) {
	params, err := poolParams(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	params.AppName = app
	if len(tracer) > 0 {
		params.Tracer = tracer[0]
	}
	pool, err := store.Connect(ctx, params)
	if err != nil {
		return nil, err
	}
	return store.New(pool, Settings(cfg), log), nil
}

// Settings are the store's view of the configuration.
func Settings(cfg config.Config) store.Settings {
	return store.Settings{
		LeaseTTL:         cfg.LeaseTTL,
		AdvertTTL:        cfg.AdvertTTL(),
		CancelGrace:      cfg.CancelGrace(),
		Starvation:       cfg.Starvation,
		RetireAfter:      cfg.NodeRetireAfter,
		MaxRunWidth:      cfg.MaxRunWidth,
		RetentionDays:    cfg.RetentionDays,
		QuarantineAfter:  cfg.QuarantineAfter,
		MaxHoldSeconds:   cfg.MaxHoldSeconds,
		HoldExpiringLead: cfg.HoldExpiringLead,
	}
}

func poolParams(ctx context.Context, db config.Database) (store.PoolParams, error) {
	return dbcreds.PoolParams(ctx, db, func(ctx context.Context) (aws.Config, error) {
		return awsconfig.LoadDefaultConfig(ctx)
	})
}

// CheckSchema refuses a database whose schema is older than this build (or dirty).
func CheckSchema(ctx context.Context, st *store.Store) error {
	v, dirty, err := st.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if migrations.Behind(v, dirty) {
		return fmt.Errorf("the database schema is at version %d (dirty: %t) and this build needs %d: run the migrate function (make migrate locally)", v, dirty, migrations.Latest())
	}
	return nil
}

func exit(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}

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
	// AWS is the AWS configuration the function's clients share.
	AWS *AWS
}

// AWS is a function's AWS configuration, loaded when a client first needs it and shared by
// every client after: each load reads the environment and the shared files again, and costs
// a cold start milliseconds (a function with events, logs and push has three clients, four
// with IAM database auth). Options change it as the environment would (make dev's local
// stand-ins). A function's init is one goroutine: it is not for concurrent use.
type AWS struct {
	opts []func(*awsconfig.LoadOptions) error
	cfg  *aws.Config
}

// NewAWS is the configuration awsconfig.LoadDefaultConfig gives with opts.
func NewAWS(opts ...func(*awsconfig.LoadOptions) error) *AWS { return &AWS{opts: opts} }

// Config loads the configuration the first time it is asked for, and answers that one after.
func (a *AWS) Config(ctx context.Context) (aws.Config, error) {
	if a.cfg == nil {
		c, err := awsconfig.LoadDefaultConfig(ctx, a.opts...)
		if err != nil {
			return aws.Config{}, err
		}
		a.cfg = &c
	}
	return *a.cfg, nil
}

// Init prepares a function that serves requests: it refuses to start when the database's
// schema is behind this build.
func Init(name string) Deps {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Open(ctx, name, os.Getenv)
	if err == nil {
		d.Publisher, err = Publisher(ctx, d.Config, d.AWS, d.Store, d.Log)
	}
	if err == nil {
		d.Logs, err = LogBucket(ctx, d.Config, d.AWS)
	}
	if err == nil {
		d.Hinter, err = Hinter(ctx, d.Config, d.AWS, d.Log)
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
	a := NewAWS()
	st, err := openStore(ctx, cfg, a, "mediator-"+name, log, nil)
	if err != nil {
		return Deps{}, err
	}
	return Deps{Store: st, Config: cfg, Log: log, AWS: a}, nil
}

// Publisher is the events' publisher when EVENT_BUS_NAME names a bus, else nil. Its
// EventBridge client takes the AWS configuration a, endpoint included
// (AWS_ENDPOINT_URL_EVENTBRIDGE points it at a local stand-in).
func Publisher(ctx context.Context, cfg config.Config, a *AWS, st *store.Store, log *slog.Logger) (*publish.Publisher, error) {
	if cfg.EventBusName == "" {
		return nil, nil
	}
	awsCfg, err := a.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("EVENT_BUS_NAME is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return publish.New(eventbridge.NewFromConfig(awsCfg), cfg.EventBusName, st, log), nil
}

// Hinter is the push hints' publisher when IOT_DATA_ENDPOINT names IoT's data plane, else nil.
// It signs with the credentials of a, for its region.
func Hinter(ctx context.Context, cfg config.Config, a *AWS, log *slog.Logger) (*push.Hinter, error) {
	if cfg.Push.DataEndpoint == "" {
		return nil, nil
	}
	awsCfg, err := a.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("IOT_DATA_ENDPOINT is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return push.New(cfg.Push.DataEndpoint, awsCfg.Region, awsCfg.Credentials, log)
}

// LogBucket is the step logs' bucket when LOG_BUCKET names one, else nil. Its S3 client takes
// the AWS configuration a, endpoint included (AWS_ENDPOINT_URL_S3 points it at a local
// stand-in, addressed path-style), and signs the URLs it hands out with its credentials (make
// dev gives it an AWS of its own, with options that point it at its local S3 without touching
// the other clients').
func LogBucket(ctx context.Context, cfg config.Config, a *AWS) (*steplogs.Bucket, error) {
	if cfg.Logs.Bucket == "" {
		return nil, nil
	}
	awsCfg, err := a.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("LOG_BUCKET is set, but the AWS configuration cannot be loaded: %w", err)
	}
	return steplogs.New(steplogs.NewClient(awsCfg), cfg.Logs), nil
}

// OpenStore connects with the configured credentials and the store's settings. A tracer, if
// given, sees every statement.
func OpenStore(ctx context.Context, cfg config.Config, app string, log *slog.Logger, tracer ...pgx.QueryTracer) (*store.Store, error) {
	var t pgx.QueryTracer
	if len(tracer) > 0 {
		t = tracer[0]
	}
	return openStore(ctx, cfg, NewAWS(), app, log, t)
}

// openStore is OpenStore with the credentials, where they live in AWS, through a.
func openStore(ctx context.Context, cfg config.Config, a *AWS, app string, log *slog.Logger, tracer pgx.QueryTracer) (*store.Store, error) {
	params, err := dbcreds.PoolParams(ctx, cfg.Database, a.Config)
	if err != nil {
		return nil, err
	}
	params.AppName = app
	params.Tracer = tracer
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

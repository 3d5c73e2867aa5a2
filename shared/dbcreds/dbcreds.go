// Package dbcreds turns the database settings into connection parameters, with credentials
// from wherever the deployment keeps them:
//
//   - DATABASE_URL: used as given.
//   - DB_SECRET_ARN: a Secrets Manager secret in the RDS shape, read once per cold start.
//     DB_HOST, when set, replaces the secret's host: the secret names the cluster, the functions
//     connect through the RDS Proxy.
//   - DB_IAM_AUTH=true: no password at all; every new connection gets a fresh RDS IAM token,
//     minted in pgx's BeforeConnect, because a token is only good for 15 minutes and a Lambda
//     environment can live for hours.
package dbcreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"mediator/shared/config"
	"mediator/shared/store"
)

// LoadAWS loads the AWS configuration (awsconfig.LoadDefaultConfig in a function; a stand-in
// endpoint in tests). It is only called when the credentials live in AWS.
type LoadAWS func(context.Context) (aws.Config, error)

// PoolParams returns how to connect; the caller adds the pool's own settings.
func PoolParams(ctx context.Context, db config.Database, loadAWS LoadAWS) (store.PoolParams, error) {
	p := store.PoolParams{
		MaxConns: db.MaxConns, StatementTimeout: db.StatementTimeout, LockTimeout: db.LockTimeout,
		IdleInTxTimeout: db.IdleInTxTimeout,
		ViaProxy:        db.ViaProxy,
	}
	switch {
	case db.URL != "":
		p.URL = db.URL
		return p, nil
	case db.SecretARN != "":
		cfg, err := loadAWS(ctx)
		if err != nil {
			return p, fmt.Errorf("dbcreds: load the AWS configuration: %w", err)
		}
		p.URL, err = fromSecret(ctx, secretsmanager.NewFromConfig(cfg), db)
		return p, err
	case db.IAMAuth:
		cfg, err := loadAWS(ctx)
		if err != nil {
			return p, fmt.Errorf("dbcreds: load the AWS configuration: %w", err)
		}
		p.URL = dsn(db.User, "", db.Host, db.Port, db.Name, db)
		p.BeforeConnect = iamToken(db, cfg)
		return p, nil
	}
	return p, errors.New("dbcreds: no database credentials configured")
}

// secret is the RDS shape of a database secret.
type secret struct {
	Username string          `json:"username"`
	Password string          `json:"password"`
	Host     string          `json:"host"`
	Port     json.RawMessage `json:"port"` // a number in RDS's secrets, a string in some hand-made ones
	DBName   string          `json:"dbname"`
}

// SecretsManager is the one call this package makes.
type SecretsManager interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// readSecret reads the secret arn, which the variable setting names, in the RDS shape.
func readSecret(ctx context.Context, sm SecretsManager, arn, setting string) (secret, error) {
	var s secret
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return s, fmt.Errorf("dbcreds: read the secret %s names: %w", setting, err)
	}
	if out.SecretString == nil || json.Unmarshal([]byte(*out.SecretString), &s) != nil {
		return s, fmt.Errorf("dbcreds: the %s secret is not JSON in the RDS shape (username, password, host, port, dbname)", setting)
	}
	return s, nil
}

func fromSecret(ctx context.Context, sm SecretsManager, db config.Database) (string, error) {
	s, err := readSecret(ctx, sm, db.SecretARN, "DB_SECRET_ARN")
	if err != nil {
		return "", err
	}
	host, port, name := s.Host, db.Port, s.DBName
	if p, err := strconv.Atoi(string(trimQuotes(s.Port))); err == nil && p > 0 {
		port = p
	}
	if db.Host != "" {
		host = db.Host
	}
	if db.Name != "" {
		name = db.Name
	}
	switch {
	case s.Username == "" || s.Password == "":
		return "", errors.New("dbcreds: the DB_SECRET_ARN secret has no username or password")
	case host == "" || name == "":
		return "", errors.New("dbcreds: no database host or name (set DB_HOST and DB_NAME, or put host and dbname in the secret)")
	}
	return dsn(s.Username, s.Password, host, port, name, db), nil
}

// AppRole is the application role as the migrate function sets it up (store.Migrate):
// DB_APP_USER, with, when DB_APP_SECRET_ARN is set, the password of that secret, which RDS
// Proxy logs in with. The secret's username must be DB_APP_USER: the functions log in by the
// one, the grants go to the other.
func AppRole(ctx context.Context, db config.Database, loadAWS LoadAWS) (store.AppRole, error) {
	app := store.AppRole{Name: db.AppUser}
	if db.AppSecretARN == "" {
		return app, nil
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return app, fmt.Errorf("dbcreds: load the AWS configuration: %w", err)
	}
	s, err := readSecret(ctx, secretsmanager.NewFromConfig(cfg), db.AppSecretARN, "DB_APP_SECRET_ARN")
	switch {
	case err != nil:
		return app, err
	case s.Password == "":
		return app, errors.New("dbcreds: the DB_APP_SECRET_ARN secret has no password")
	case s.Username != db.AppUser:
		return app, fmt.Errorf("dbcreds: the DB_APP_SECRET_ARN secret's username is %q, and DB_APP_USER is %q: they name one role", s.Username, db.AppUser)
	}
	app.Password = s.Password
	return app, nil
}

func trimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// iamToken mints an RDS IAM token for each new connection.
func iamToken(db config.Database, cfg aws.Config) func(context.Context, *pgx.ConnConfig) error {
	endpoint := net.JoinHostPort(db.Host, strconv.Itoa(db.Port))
	return func(ctx context.Context, cc *pgx.ConnConfig) error {
		token, err := auth.BuildAuthToken(ctx, endpoint, db.Region, db.User, cfg.Credentials)
		if err != nil {
			return fmt.Errorf("dbcreds: mint an RDS IAM token: %w", err)
		}
		cc.Password = token
		return nil
	}
}

// dsn is the connection URL pgx parses. TLS is db's: its sslmode, and sslrootcert when a CA
// bundle is configured, which pgx then verifies the server against in place of the system's
// CAs (for verify-full, the host name too; for require, pgx verifies the chain as verify-ca).
func dsn(user, password, host string, port int, name string, db config.Database) string {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/" + name}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	q := url.Values{"sslmode": {db.SSLMode}}
	if db.SSLRootCert != "" {
		q.Set("sslrootcert", db.SSLRootCert)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

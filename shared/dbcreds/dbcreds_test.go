package dbcreds_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"

	"mediator/localdev/testdb"
	"mediator/shared/config"
	"mediator/shared/dbcreds"
	"mediator/shared/store"
)

// standIn answers Secrets Manager's JSON protocol (POST /, X-Amz-Target) with one secret.
func standIn(t *testing.T, arn, secretJSON string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in struct{ SecretId string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || !strings.Contains(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
			http.Error(w, `{"__type":"InvalidRequestException"}`, 400)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if in.SecretId != arn {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"__type":"ResourceNotFoundException","message":"no such secret"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": arn, "Name": "mediator-db", "SecretString": secretJSON})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// awsAt points the SDK at a stand-in endpoint, with fixed credentials.
func awsAt(endpoint string) dbcreds.LoadAWS {
	return func(context.Context) (aws.Config, error) {
		return aws.Config{
			Region:       "eu-west-1",
			Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
			BaseEndpoint: aws.String(endpoint),
		}, nil
	}
}

// The secret names the real test database; a password full of URL syntax survives the trip,
// DB_HOST replaces the secret's host, and the store connects with what came out.
func TestSecretsManagerSecret(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(target.Host)
	secret, _ := json.Marshal(map[string]any{
		"username": "postgres", "password": "p@ss:w/o?rd#%", "host": "cluster.example.internal",
		"port": json.Number(port), "dbname": strings.TrimPrefix(target.Path, "/"), "engine": "postgres",
	})
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mediator-db-AbCdEf"
	srv, calls := standIn(t, arn, string(secret))
	db := config.Database{SecretARN: arn, Host: host, SSLMode: "disable", MaxConns: 1}
	p, err := dbcreds.PoolParams(context.Background(), db, awsAt(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := pgx.ParseConfig(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	if cc.User != "postgres" || cc.Password != "p@ss:w/o?rd#%" || cc.Host != host {
		t.Fatalf("parsed back: user %q password %q host %q", cc.User, cc.Password, cc.Host)
	}
	pool, err := store.Connect(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("connect with the secret's credentials: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the secret was read %d times; once per cold start", calls.Load())
	}
}

func TestSecretProblemsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x"
	for secret, want := range map[string]string{
		`not json`:                          "RDS shape",
		`{"username":"u","host":"h"}`:       "no username or password",
		`{"username":"u","password":"p1x"}`: "host or name",
	} {
		srv, _ := standIn(t, arn, secret)
		_, err := dbcreds.PoolParams(context.Background(), config.Database{SecretARN: arn, Port: 5432}, awsAt(srv.URL))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "p1x") {
			t.Errorf("%s: %v (want %q, and never the password)", secret, err, want)
		}
	}
	srv, _ := standIn(t, arn, `{}`)
	if _, err := dbcreds.PoolParams(context.Background(), config.Database{SecretARN: arn + "-other"}, awsAt(srv.URL)); err == nil {
		t.Error("a missing secret was accepted")
	}
}

// With IAM auth every new connection gets a fresh token as its password: a SigV4-presigned
// rds-db:connect for that host, port and user. Local PostgreSQL trusts any password, so the
// pool really connects through BeforeConnect.
func TestIAMTokenPerConnection(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(target.Host)
	p0, _ := strconv.Atoi(port)
	db := config.Database{IAMAuth: true, Host: host, Port: p0, User: "postgres", Name: strings.TrimPrefix(target.Path, "/"),
		Region: "eu-west-1", SSLMode: "disable", MaxConns: 2}
	p, err := dbcreds.PoolParams(context.Background(), db, awsAt("http://unused"))
	if err != nil {
		t.Fatal(err)
	}
	var minted atomic.Int32
	before := p.BeforeConnect
	p.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if err := before(ctx, cc); err != nil {
			return err
		}
		minted.Add(1)
		for _, part := range []string{host + ":" + port + "?", "Action=connect", "DBUser=postgres", "X-Amz-Signature=", "X-Amz-Credential=AKIDEXAMPLE"} {
			if !strings.Contains(cc.Password, part) {
				t.Errorf("token %q lacks %q", cc.Password, part)
			}
		}
		return nil
	}
	pool, err := store.Connect(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conns := make([]*pgx.Conn, 0, 2)
	for range 2 {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns = append(conns, c.Conn())
	}
	if minted.Load() != 2 {
		t.Fatalf("%d tokens for 2 connections", minted.Load())
	}
}

// The migrate function's view of the application role: DB_APP_USER, with the password of its
// secret when DB_APP_SECRET_ARN names one, whose username must be the same role; without the
// secret, no AWS call at all.
func TestAppRoleFromItsSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:mediator-db-app-AbCdEf"
	noAWS := func(context.Context) (aws.Config, error) {
		t.Error("the AWS configuration was loaded without an application secret")
		return aws.Config{}, nil
	}
	if app, err := dbcreds.AppRole(ctx, config.Database{AppUser: "mediator_app"}, noAWS); err != nil || app != (store.AppRole{Name: "mediator_app"}) {
		t.Errorf("without a secret: %+v, %v", app, err)
	}
	srv, _ := standIn(t, arn, `{"username":"mediator_app","password":"s3cret-pw","dbname":"mediator"}`)
	app, err := dbcreds.AppRole(ctx, config.Database{AppUser: "mediator_app", AppSecretARN: arn}, awsAt(srv.URL))
	if err != nil || app != (store.AppRole{Name: "mediator_app", Password: "s3cret-pw"}) {
		t.Errorf("from its secret: %+v, %v", app, err)
	}
	_, err = dbcreds.AppRole(ctx, config.Database{AppUser: "mediator_other", AppSecretARN: arn}, awsAt(srv.URL))
	if err == nil || !strings.Contains(err.Error(), "mediator_other") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("a secret of another role: %v; want both names, never the password", err)
	}
	srv, _ = standIn(t, arn, `{"username":"mediator_app"}`)
	if _, err := dbcreds.AppRole(ctx, config.Database{AppUser: "mediator_app", AppSecretARN: arn}, awsAt(srv.URL)); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Errorf("a secret without a password: %v", err)
	}
}

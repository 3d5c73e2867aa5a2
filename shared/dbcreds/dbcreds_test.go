package dbcreds_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// issuer is a CA that signs server certificates, as the RDS CA signs Aurora's.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newIssuer(t *testing.T, name string) issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return issuer{cert, key}
}

// bundle writes the CA's certificate as a PEM file, the shape of RDS's global-bundle.pem.
func (ca issuer) bundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve starts a server that answers PostgreSQL's SSLRequest, offers a certificate of ca for
// 127.0.0.1, and hangs up at the first byte the client sends over TLS: what a client's
// verification of the server decides is whether it sends one. It counts the clients that did.
func (ca issuer) serve(t *testing.T) (int, *atomic.Int32) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var done atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				var req [8]byte // length 8, then the SSLRequest code
				if _, err := io.ReadFull(conn, req[:]); err != nil || binary.BigEndian.Uint32(req[4:]) != 80877103 {
					return
				}
				if _, err := conn.Write([]byte("S")); err != nil {
					return
				}
				// In TLS 1.3 the server's side of the handshake may end before the client has
				// checked the certificate: the client's first message (the startup packet) is
				// what says it accepted it.
				var first [1]byte
				if _, err := io.ReadFull(tls.Server(conn, cfg), first[:]); err == nil {
					done.Add(1)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, &done
}

// DB_SSLROOTCERT is what pgx verifies the server by: with the bundle of the CA that signed the
// server's certificate, pgx sends its startup packet over TLS (the stand-in then hangs up); with another
// CA's bundle, or with none — the system's CAs, which is how an Aurora endpoint fails without
// RDS's bundle — pgx refuses the certificate before sending anything.
func TestRootCertVerifiesTheServer(t *testing.T) {
	t.Parallel()
	rds, other := newIssuer(t, "test RDS root"), newIssuer(t, "another root")
	connect := func(port int, mode, rootCert string) error {
		db := config.Database{IAMAuth: true, Host: "127.0.0.1", Port: port, User: "mediator", Name: "mediator",
			Region: "eu-west-1", SSLMode: mode, SSLRootCert: rootCert, MaxConns: 1}
		p, err := dbcreds.PoolParams(context.Background(), db, awsAt("http://unused"))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := url.Parse(p.URL); got.Query().Get("sslrootcert") != rootCert {
			t.Errorf("the connection URL's sslrootcert is %q, want %q", got.Query().Get("sslrootcert"), rootCert)
		}
		pool, err := store.Connect(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		return pool.Ping(context.Background())
	}
	for _, c := range []struct {
		name, mode, rootCert string
		verified             bool
	}{
		{"verify-full, the server's CA", "verify-full", rds.bundle(t), true},
		{"verify-ca, the server's CA", "verify-ca", rds.bundle(t), true},
		{"verify-full, another CA", "verify-full", other.bundle(t), false},
		{"verify-full, the system's CAs", "verify-full", "", false},
	} {
		// A server of its own for each case: pgx may try a connection again after the
		// stand-in hangs up, and a late try must not count for the next case.
		port, accepted := rds.serve(t)
		err := connect(port, c.mode, c.rootCert)
		if err == nil {
			t.Fatalf("%s: connected to a server that speaks no PostgreSQL", c.name)
		}
		// The stand-in counts the client's first byte before the client sees it hang up; give it
		// that moment.
		deadline := time.Now().Add(2 * time.Second)
		for c.verified && accepted.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		refused := strings.Contains(err.Error(), "certificate")
		if verified := accepted.Load() > 0; verified != c.verified || refused == c.verified {
			t.Errorf("%s: server verified %t, certificate refused %t (%v); want verified %t", c.name, verified, refused, err, c.verified)
		}
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

package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Auth puts a caller's credentials on a request. It is called for every attempt, with the
// exact bytes the request carries, so a signature is always fresh and always over the body
// that is sent.
type Auth interface {
	Authorize(ctx context.Context, req *http.Request, body []byte) error
}

// Bearer sends "Authorization: Bearer <token>": the local gateway's development tokens, or a
// JWT for API Gateway's JWT authorizer.
type Bearer string

// Authorize sets the Authorization header; an empty token sends none.
func (b Bearer) Authorize(_ context.Context, req *http.Request, _ []byte) error {
	if b != "" {
		req.Header.Set("Authorization", "Bearer "+string(b))
	}
	return nil
}

// SigV4 signs requests with AWS Signature Version 4, for API Gateway's IAM authorizer.
type SigV4 struct {
	Credentials aws.CredentialsProvider
	// Region to sign for. "" takes it from the host (<api-id>.execute-api.<region>.amazonaws.com),
	// and, for a host that does not say (a custom domain), DefaultRegion.
	Region        string
	DefaultRegion string
	// Service is the signing name; "" is execute-api.
	Service string
	// Now is the signing clock; nil is time.Now.
	Now func() time.Time

	once   sync.Once
	signer *v4.Signer
}

// RenewBefore is how long before they expire the credentials NewSigV4 signs with are renewed:
// API Gateway refuses (403) a request whose session expired between its signing and its
// arrival, and an agent takes a first heartbeat refused so for a setup error and stops.
const RenewBefore = time.Minute

// NewSigV4 signs with the credentials of the default AWS chain (environment, shared config and
// credentials files, SSO, credential_process, the container or instance role). region
// overrides the host's. The chain's provider comes wrapped in the SDK's credentials cache, and
// every request asks it: credentials that expire — an instance profile's, those IAM Roles
// Anywhere's helper hands credential_process — are fetched again RenewBefore their expiry, so
// a process that runs for months (mediator agent) signs with fresh ones without a restart.
func NewSigV4(ctx context.Context, region string) (*SigV4, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = RenewBefore
	}))
	if err != nil {
		return nil, err
	}
	if cfg.Credentials == nil {
		return nil, errors.New("no AWS credentials found in the default chain")
	}
	return &SigV4{Credentials: cfg.Credentials, Region: region, DefaultRegion: cfg.Region}, nil
}

// executeAPIHost is API Gateway's default endpoint, public or through a VPC endpoint.
var executeAPIHost = regexp.MustCompile(`\.execute-api\.([a-z0-9-]+)\.(?:vpce\.)?amazonaws\.com(?:\.cn)?$`)

// RegionOf is the region in an API Gateway endpoint's host name, or "".
func RegionOf(host string) string {
	if m := executeAPIHost.FindStringSubmatch(host); m != nil {
		return m[1]
	}
	return ""
}

// emptySHA256 is the hash of no body at all.
var emptySHA256 = hex.EncodeToString(sha256.New().Sum(nil))

// Authorize signs req over body. X-Amz-Content-Sha256 carries the body's hash, and is signed
// with it: API Gateway hashes the bytes it receives, so a body changed on the way fails.
func (s *SigV4) Authorize(ctx context.Context, req *http.Request, body []byte) error {
	region := s.Region
	if region == "" {
		region = RegionOf(req.URL.Hostname())
	}
	if region == "" {
		region = s.DefaultRegion
	}
	if region == "" {
		return errors.New("sigv4: no region: the host is not <api-id>.execute-api.<region>.amazonaws.com; give one")
	}
	service := s.Service
	if service == "" {
		service = "execute-api"
	}
	if s.Credentials == nil {
		return errors.New("sigv4: no credentials")
	}
	creds, err := s.Credentials.Retrieve(ctx)
	if err != nil {
		return err
	}
	hash := emptySHA256
	if len(body) > 0 {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", hash)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.once.Do(func() { s.signer = v4.NewSigner() })
	return s.signer.SignHTTP(ctx, creds, req, hash, service, region, now())
}

// Package s3 is a local stand-in for Amazon S3, speaking S3's REST protocol with path-style
// addressing (http://127.0.0.1:PORT/<bucket>/<key>) so the real aws-sdk-go-v2 S3 client and
// presigner can be pointed at it, and so can a plain net/http client holding a presigned URL.
//
// It serves what Mediator's step logs need and nothing more: PutObject, GetObject (with Range),
// HeadObject, DeleteObject, ListObjectsV2, DeleteObjects, CreateBucket and HeadBucket. Anything
// else is answered 501 NotImplemented, so code that starts to depend on another operation fails
// here loudly instead of passing against a stand-in that pretends.
//
// Every request must be authenticated as S3 authenticates it: AWS Signature Version 4 for
// service s3 in the server's region, in the Authorization header (what the SDK client sends) or
// in the query (a presigned URL). The server recomputes the signature from the request it
// received and refuses, with S3's error codes, a wrong signature, an unknown access key, an
// expired or not yet valid presigned URL, a request time too far from its clock, and x-amz-*
// headers that were sent but not signed. Bodies are checked against x-amz-content-sha256,
// Content-MD5 and x-amz-checksum-* before anything is stored.
//
// Not served: multipart uploads, CopyObject, ListObjects version 1, versions, ACLs and policies
// (the one key may do everything), POST uploads from a browser form (the presigner's
// PresignPostObject), conditional requests (If-Match, If-None-Match, … are ignored), CORS
// beyond AllowOrigin's one rule, virtual-hosted addressing, Signature Version 4a, and the
// aws-chunked streaming payloads the SDK sends only over HTTPS.
//
// Objects live in memory, and also in a directory when Options.Dir is set, so a local stack can
// keep its logs across restarts.
//
// The rest of the code reaches it with the SDK's ordinary configuration. Client and
// PresignClient build the SDK's client and presigner pointed at it; by hand (s3 being the
// SDK's package) that is
//
//	s3.New(s3.Options{
//		BaseEndpoint: aws.String(srv.URL()),
//		UsePathStyle: true,
//		Region:       srv.Region(),
//		Credentials:  credentials.NewStaticCredentialsProvider(DefaultAccessKeyID, DefaultSecretAccessKey, ""),
//		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
//	})
//
// and a process configured from the environment takes AWS_ENDPOINT_URL_S3=<URL>,
// AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (config.LoadDefaultConfig reads all
// four); the SDK addresses an IP-literal endpoint path-style by itself, and UsePathStyle makes it
// so for a host name such as localhost.
//
// Import it under another name beside the SDK's package, e.g. locals3 "mediator/localdev/s3".
package s3

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

// The credentials the server knows when Options leave them empty: those the SDK's own tests
// sign with, so nothing real is ever mistaken for them.
const (
	DefaultAccessKeyID     = "AKID"
	DefaultSecretAccessKey = "SECRET"
	DefaultRegion          = "us-east-1"
)

// DefaultMaxObjectSize is the largest object accepted when Options leave it zero. S3's own
// limit for a single PUT is 5 GiB; objects here are held in memory, and a log chunk is far
// smaller than this.
const DefaultMaxObjectSize = 64 << 20

// Options configure a server.
type Options struct {
	// Port to listen on at 127.0.0.1; 0 takes a free one.
	Port int
	// Region is the region requests must be signed for (DefaultRegion when empty).
	Region string
	// AccessKeyID and SecretAccessKey are the one key pair the server knows (the defaults when
	// both are empty).
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken, when set, must come with every request, as temporary credentials' token
	// does (X-Amz-Security-Token); when empty, a request carrying one is refused.
	SessionToken string
	// Buckets exist from the start.
	Buckets []string
	// MaxObjectSize is the largest PutObject body accepted (DefaultMaxObjectSize when zero);
	// larger ones are refused with EntityTooLarge before their body is read.
	MaxObjectSize int64
	// Dir, when set, keeps every bucket and object there too, and loads them at start.
	Dir string
	// Now is the server's clock, against which request times and presigned URLs' expiry are
	// judged (time.Now when nil).
	Now func() time.Time
}

// Server is a running stand-in.
type Server struct {
	url     string
	region  string
	key     string
	secret  string
	token   string
	maxSize int64
	now     func() time.Time
	srv     *http.Server
	store   *store

	mu       sync.Mutex
	origins  map[string]bool // AllowOrigin's
	requests map[string]int  // by operation
	refused  map[string]int  // by error code
	seq      uint64
}

// Start listens on 127.0.0.1 and serves until Close, or until ctx is done.
func Start(ctx context.Context, o Options) (*Server, error) {
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		return nil, errors.New("s3: set both an access key id and a secret access key, or neither")
	}
	if o.AccessKeyID == "" {
		o.AccessKeyID, o.SecretAccessKey = DefaultAccessKeyID, DefaultSecretAccessKey
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.MaxObjectSize <= 0 {
		o.MaxObjectSize = DefaultMaxObjectSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	st, err := openStore(o.Dir)
	if err != nil {
		return nil, err
	}
	s := &Server{
		region: o.Region, key: o.AccessKeyID, secret: o.SecretAccessKey, token: o.SessionToken,
		maxSize: o.MaxObjectSize, now: o.Now, store: st,
		requests: map[string]int{}, refused: map[string]int{},
	}
	for _, b := range o.Buckets {
		if err := s.CreateBucket(b); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)))
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// AllowOrigin lets pages of origin (http://127.0.0.1:3000) read objects through presigned GET
// URLs, as the deployed bucket's CORS rule lets the console's origin (template.yaml,
// ConsoleOrigin): a GET or HEAD sent with that Origin is answered with
// Access-Control-Allow-Origin. That one rule is all of CORS served here.
func (s *Server) AllowOrigin(origin string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.origins == nil {
		s.origins = map[string]bool{}
	}
	s.origins[origin] = true
}

func (s *Server) allowed(origin string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return origin != "" && s.origins[origin]
}

// Close stops serving and drops open connections.
func (s *Server) Close() error { return s.srv.Close() }

// URL is the endpoint: a client's BaseEndpoint, AWS_ENDPOINT_URL_S3.
func (s *Server) URL() string { return s.url }

// Region is the region requests must be signed for.
func (s *Server) Region() string { return s.region }

// Credentials are the key pair (and token) the server accepts.
func (s *Server) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.key, s.secret, s.token)
}

// ClientOptions point an SDK client's options at the server: its URL, path-style addressing,
// its region and the credentials it accepts. Checksums are sent and verified whenever the
// operation supports them, as config.LoadDefaultConfig's clients do (s3.New alone would send
// them only where S3 requires them), so tests exercise what Mediator's clients send.
func (s *Server) ClientOptions(o *awss3.Options) {
	o.BaseEndpoint = aws.String(s.url)
	o.UsePathStyle = true
	o.Region = s.region
	o.Credentials = s.Credentials()
	o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported
	o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenSupported
}

// Client is the real SDK client, pointed at the server; optFns apply after ClientOptions, so
// a test can give it other credentials or no retries.
func (s *Server) Client(optFns ...func(*awss3.Options)) *awss3.Client {
	return awss3.New(awss3.Options{}, append([]func(*awss3.Options){s.ClientOptions}, optFns...)...)
}

// PresignClient is the real SDK presigner over Client(optFns...).
func (s *Server) PresignClient(optFns ...func(*awss3.Options)) *awss3.PresignClient {
	return awss3.NewPresignClient(s.Client(optFns...))
}

// CreateBucket makes a bucket, as CreateBucket does; an existing one is left as it is.
func (s *Server) CreateBucket(name string) error {
	if !validBucketName(name) {
		return fmt.Errorf("s3: %q is not a valid bucket name", name)
	}
	_, err := s.store.createBucket(name)
	return err
}

// Objects are what a bucket holds, in key order, without their bodies.
func (s *Server) Objects(bucket string) []ObjectInfo { return s.store.list(bucket) }

// Object is one stored object and its body.
func (s *Server) Object(bucket, key string) ([]byte, ObjectInfo, bool) {
	o, ok := s.store.get(bucket, key)
	if !ok {
		return nil, ObjectInfo{}, false
	}
	return o.Body, o.ObjectInfo, true
}

// Requests counts the requests answered, by the operation they addressed ("PutObject",
// "GetObject", "HeadObject", "DeleteObject", "DeleteObjects", "ListObjectsV2", "CreateBucket",
// "HeadBucket", or "Unsupported"), refused ones included.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}

// Refused counts the requests refused, by S3 error code ("SignatureDoesNotMatch", ...).
func (s *Server) Refused() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.refused)
}

// begin counts a request for its operation and names it, as S3's x-amz-request-id does.
func (s *Server) begin(op string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
	s.seq++
	return fmt.Sprintf("%016X", s.seq)
}

func (s *Server) countRefusal(code string) {
	s.mu.Lock()
	s.refused[code]++
	s.mu.Unlock()
}

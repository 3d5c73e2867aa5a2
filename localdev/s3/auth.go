package s3

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	sigAlgorithm    = "AWS4-HMAC-SHA256"
	amzDateLayout   = "20060102T150405Z"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	// maxSkew is how far S3 lets a request's time stray from its clock: a header-signed
	// request beyond it is RequestTimeTooSkewed, a presigned URL dated beyond it in the future
	// is not yet valid.
	maxSkew = 15 * time.Minute
	// maxExpires is the longest a presigned URL may live, in seconds: a week.
	maxExpires = 7 * 24 * 60 * 60
)

// claim is what a request says of its own signature, from its Authorization header or, when
// presigned, from its query.
type claim struct {
	presigned     bool
	cred          credential
	signedHeaders []string
	signedRaw     string // SignedHeaders as sent: the canonical request holds it verbatim
	signature     string
	amzDate       string
	at            time.Time
	expires       time.Duration // presigned only
	payloadHash   string
	token         string
	tokenSent     bool
}

// credential is the Credential field: <key>/<yyyymmdd>/<region>/<service>/aws4_request.
type credential struct{ key, date, region, service, terminator string }

func (c credential) scope() string {
	return c.date + "/" + c.region + "/" + c.service + "/" + c.terminator
}

func parseCredential(s string) (credential, bool) {
	p := strings.Split(s, "/")
	if len(p) != 5 || p[0] == "" {
		return credential{}, false
	}
	return credential{p[0], p[1], p[2], p[3], p[4]}, true
}

// authenticate verifies r's Signature Version 4 as S3 does, in S3's order: the form of the
// signature, the access key, the credential's scope, the request's time, the session token,
// that every x-amz-* header sent was signed, and last the signature itself, recomputed here
// from what arrived. The body is checked against the claimed payload hash once it is read
// (checkPayload).
func (s *Server) authenticate(r *http.Request, q query) (*claim, *apiError) {
	header := r.Header.Get("Authorization")
	_, presigned := q.get("X-Amz-Algorithm")
	switch {
	case header != "" && presigned:
		return nil, errInvalidArgument("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
	case !presigned && (q.has("AWSAccessKeyId") || q.has("Signature")):
		return nil, errNotSigV4()
	case header == "" && !presigned:
		return nil, errAccessDenied("Access Denied")
	}
	var c *claim
	var e *apiError
	if presigned {
		c, e = parsePresigned(r, q)
	} else {
		c, e = parseAuthorization(r, header)
	}
	if e != nil {
		return nil, e
	}
	for _, check := range []func(*claim) *apiError{s.checkKey, s.checkScope, s.checkTime, s.checkToken, checkPayloadForm} {
		if e := check(c); e != nil {
			return nil, e
		}
	}
	if e := checkAllSigned(r, c); e != nil {
		return nil, e
	}
	canonical := canonicalRequest(r, q, c)
	toSign := stringToSign(c, canonical)
	want := sign(signingKey(s.secret, c.cred), toSign)
	if subtle.ConstantTimeCompare([]byte(want), []byte(c.signature)) != 1 {
		return nil, errSignatureDoesNotMatch().
			with("AWSAccessKeyId", c.cred.key).
			with("StringToSign", toSign).
			with("SignatureProvided", c.signature).
			with("CanonicalRequest", canonical)
	}
	return c, nil
}

func errNotSigV4() *apiError {
	return errInvalidRequest("The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.")
}

// parseAuthorization reads "AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…"
// and the headers that go with it: X-Amz-Date, X-Amz-Content-Sha256, X-Amz-Security-Token.
func parseAuthorization(r *http.Request, header string) (*claim, *apiError) {
	alg, rest, _ := strings.Cut(header, " ")
	if alg != sigAlgorithm {
		return nil, errNotSigV4()
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return nil, errHeaderMalformed("incorrect component %q", strings.TrimSpace(f))
		}
		fields[k] = v
	}
	cred, ok := parseCredential(fields["Credential"])
	if !ok {
		return nil, errHeaderMalformed(`the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`)
	}
	if fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return nil, errHeaderMalformed("it must contain Credential, SignedHeaders and Signature")
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse(amzDateLayout, amzDate)
	if err != nil {
		return nil, errAccessDenied("AWS authentication requires a valid Date or x-amz-date header")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return nil, errInvalidRequest("Missing required header for this request: x-amz-content-sha256")
	}
	token, tokenSent := headerValue(r, "X-Amz-Security-Token")
	return &claim{
		cred: cred, signedRaw: fields["SignedHeaders"], signedHeaders: strings.Split(fields["SignedHeaders"], ";"),
		signature: fields["Signature"], amzDate: amzDate, at: at, payloadHash: payload,
		token: token, tokenSent: tokenSent,
	}, nil
}

// parsePresigned reads the X-Amz-* query parameters of a presigned URL. Its payload is
// UNSIGNED-PAYLOAD, as the presigner signs it, unless the request names another.
func parsePresigned(r *http.Request, q query) (*claim, *apiError) {
	if alg, _ := q.get("X-Amz-Algorithm"); alg != sigAlgorithm {
		return nil, errQueryMalformed(`X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"`)
	}
	credStr, ok1 := q.get("X-Amz-Credential")
	amzDate, ok2 := q.get("X-Amz-Date")
	expires, ok3 := q.get("X-Amz-Expires")
	signedRaw, ok4 := q.get("X-Amz-SignedHeaders")
	signature, ok5 := q.get("X-Amz-Signature")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, errQueryMalformed("Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.")
	}
	cred, ok := parseCredential(credStr)
	if !ok {
		return nil, errQueryMalformed(`Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`)
	}
	at, err := time.Parse(amzDateLayout, amzDate)
	if err != nil {
		return nil, errQueryMalformed(`X-Amz-Date must be in the ISO8601 Long Format "yyyyMMdd'T'HHmmss'Z'"`)
	}
	secs, err := strconv.Atoi(expires)
	if err != nil || secs < 0 {
		return nil, errQueryMalformed("X-Amz-Expires should be a number")
	}
	if secs > maxExpires {
		return nil, errQueryMalformed("X-Amz-Expires must be less than a week (in seconds) that is 604800")
	}
	payload := unsignedPayload
	if v, ok := q.get("X-Amz-Content-Sha256"); ok {
		payload = v
	} else if v := r.Header.Get("X-Amz-Content-Sha256"); v != "" {
		payload = v
	}
	token, tokenSent := q.get("X-Amz-Security-Token")
	return &claim{
		presigned: true, cred: cred, signedRaw: signedRaw, signedHeaders: strings.Split(signedRaw, ";"),
		signature: signature, amzDate: amzDate, at: at, expires: time.Duration(secs) * time.Second,
		payloadHash: payload, token: token, tokenSent: tokenSent,
	}, nil
}

func (s *Server) checkKey(c *claim) *apiError {
	if subtle.ConstantTimeCompare([]byte(c.cred.key), []byte(s.key)) != 1 {
		return errInvalidAccessKeyID(c.cred.key)
	}
	return nil
}

// checkScope holds the credential to this server: the date of X-Amz-Date, its region, s3.
func (s *Server) checkScope(c *claim) *apiError {
	malformed := errHeaderMalformed
	if c.presigned {
		malformed = func(format string, args ...any) *apiError {
			return errQueryMalformed("Error parsing the X-Amz-Credential parameter; "+format, args...)
		}
	}
	switch {
	case c.cred.date != c.amzDate[:8]:
		return malformed("Invalid credential date. Date is not the same as X-Amz-Date.")
	case c.cred.region != s.region:
		return malformed("the region '%s' is wrong; expecting '%s'", c.cred.region, s.region).with("Region", s.region)
	case c.cred.service != "s3":
		return malformed("incorrect service '%s'. This endpoint belongs to 's3'.", c.cred.service)
	case c.cred.terminator != "aws4_request":
		return malformed("incorrect terminal '%s'. This endpoint uses 'aws4_request'.", c.cred.terminator)
	}
	return nil
}

// checkTime judges the request's time by the server's clock: a presigned URL lives from
// X-Amz-Date for X-Amz-Expires seconds; a header-signed request is good within maxSkew.
func (s *Server) checkTime(c *claim) *apiError {
	now := s.now().UTC()
	const iso = "2006-01-02T15:04:05Z"
	if !c.presigned {
		if d := now.Sub(c.at); d > maxSkew || d < -maxSkew {
			return newError(http.StatusForbidden, "RequestTimeTooSkewed",
				"The difference between the request time and the current time is too large.").
				with("RequestTime", c.amzDate).with("ServerTime", now.Format(iso)).
				with("MaxAllowedSkewMilliseconds", strconv.Itoa(int(maxSkew/time.Millisecond)))
		}
		return nil
	}
	expiresAt := c.at.Add(c.expires)
	switch {
	case c.at.Sub(now) > maxSkew:
		return errAccessDenied("Request is not yet valid").
			with("X-Amz-Date", c.amzDate).with("Expires", expiresAt.Format(iso)).with("ServerTime", now.Format(iso))
	case now.After(expiresAt):
		return errAccessDenied("Request has expired").
			with("X-Amz-Expires", strconv.Itoa(int(c.expires/time.Second))).
			with("Expires", expiresAt.Format(iso)).with("ServerTime", now.Format(iso))
	}
	return nil
}

// checkToken wants the session token the server was given, and none when it has none.
func (s *Server) checkToken(c *claim) *apiError {
	switch {
	case s.token == "" && !c.tokenSent:
		return nil
	case s.token != "" && !c.tokenSent:
		return errInvalidAccessKeyID(c.cred.key)
	case s.token != "" && subtle.ConstantTimeCompare([]byte(s.token), []byte(c.token)) == 1:
		return nil
	}
	return newError(http.StatusBadRequest, "InvalidToken", "The provided token is malformed or otherwise invalid.")
}

// checkPayloadForm accepts the payload hashes answered here: a SHA-256 in hex (checked
// against the body once read) or UNSIGNED-PAYLOAD. The aws-chunked streaming forms are what
// the SDK sends only over HTTPS, which this server does not speak.
func checkPayloadForm(c *claim) *apiError {
	switch {
	case c.payloadHash == unsignedPayload || isSHA256Hex(c.payloadHash):
		return nil
	case strings.HasPrefix(c.payloadHash, "STREAMING-"):
		return errNotImplemented("x-amz-content-sha256")
	}
	return errInvalidArgument("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD, STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER or a valid sha256 value.")
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// checkAllSigned refuses what S3 refuses: x-amz-* headers sent but left out of the signature
// (a presigned URL's holder could otherwise add x-amz-acl or x-amz-meta-* at will), and a
// signature that does not cover the Host.
func checkAllSigned(r *http.Request, c *claim) *apiError {
	var unsigned []string
	if !slices.Contains(c.signedHeaders, "host") {
		unsigned = append(unsigned, "host")
	}
	for name := range r.Header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "x-amz-") && !slices.Contains(c.signedHeaders, lower) {
			unsigned = append(unsigned, lower)
		}
	}
	if len(unsigned) == 0 {
		return nil
	}
	slices.Sort(unsigned)
	return errAccessDenied("There were headers present in the request which were not signed").
		with("HeadersNotSigned", strings.Join(unsigned, ", "))
}

// canonicalRequest is SigV4's canonical request of r as it arrived, over the headers the
// client says it signed, with S3's rule for the path: each byte outside the unreserved set
// percent-encoded once, slashes kept.
func canonicalRequest(r *http.Request, q query, c *claim) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	b.WriteString(uriEncode(path, true) + "\n")
	b.WriteString(canonicalQuery(q, c.presigned) + "\n")
	for _, h := range c.signedHeaders {
		v, _ := headerValue(r, h)
		b.WriteString(h + ":" + v + "\n")
	}
	b.WriteString("\n" + c.signedRaw + "\n" + c.payloadHash)
	return b.String()
}

// headerValue is a header as SigV4 canonicalizes it: its values trimmed, inner runs of spaces
// made one, joined by commas. Host and Content-Length are read where net/http keeps them.
func headerValue(r *http.Request, name string) (string, bool) {
	switch strings.ToLower(name) {
	case "host":
		return r.Host, true
	case "content-length":
		if v := r.Header.Get("Content-Length"); v != "" {
			return v, true
		}
		if r.ContentLength > 0 {
			return strconv.FormatInt(r.ContentLength, 10), true
		}
	}
	values := r.Header.Values(name)
	if values == nil {
		return "", false
	}
	clean := make([]string, len(values))
	for i, v := range values {
		clean[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(clean, ","), true
}

// canonicalQuery encodes each name and value, sorts by name then value, and joins them; a
// presigned URL's own signature is not part of what it signs.
func canonicalQuery(q query, presigned bool) string {
	pairs := make([]string, 0, len(q))
	for _, p := range q {
		if presigned && p.name == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, uriEncode(p.name, false)+"="+uriEncode(p.value, false))
	}
	// Sorting the encoded "name=value" strings would misorder names that prefix one another
	// ("a" and "a-b": '=' sorts after '-'), so sort by the encoded name, then value.
	slices.SortFunc(pairs, func(a, b string) int {
		an, av, _ := strings.Cut(a, "=")
		bn, bv, _ := strings.Cut(b, "=")
		if c := strings.Compare(an, bn); c != 0 {
			return c
		}
		return strings.Compare(av, bv)
	})
	return strings.Join(pairs, "&")
}

// uriEncode percent-encodes every byte but A-Z a-z 0-9 - _ . ~ (and /, when kept), upper-case
// hex, as SigV4 specifies.
func uriEncode(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || (keepSlash && c == '/') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '~'
}

func stringToSign(c *claim, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return sigAlgorithm + "\n" + c.amzDate + "\n" + c.cred.scope() + "\n" + hex.EncodeToString(sum[:])
}

// signingKey derives SigV4's key: the secret HMAC-chained through the credential's date,
// region, service and terminator.
func signingKey(secret string, c credential) []byte {
	k := []byte("AWS4" + secret)
	for _, part := range []string{c.date, c.region, c.service, c.terminator} {
		k = hmacSHA256(k, part)
	}
	return k
}

func sign(key []byte, toSign string) string { return hex.EncodeToString(hmacSHA256(key, toSign)) }

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// param is one query parameter, decoded; query keeps them all, in order, repeats included,
// since the signature covers every one.
type param struct{ name, value string }

type query []param

func (q query) get(name string) (string, bool) {
	for _, p := range q {
		if p.name == name {
			return p.value, true
		}
	}
	return "", false
}

func (q query) has(name string) bool { _, ok := q.get(name); return ok }

// parseQuery decodes a raw query as S3 reads it: a parameter without "=" ("?delete") has an
// empty value, and "+" is a space.
func parseQuery(raw string) (query, error) {
	var q query
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return nil, err
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, err
		}
		q = append(q, param{name, value})
	}
	return q, nil
}

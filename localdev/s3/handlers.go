package s3

import (
	"encoding/xml"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxRequestBody bounds the bodies of requests other than PutObject: a DeleteObjects of 1,000
// keys of 1,024 bytes each fits in it.
const maxRequestBody = 2 << 20

// maxKeyLength is S3's longest key, in bytes of UTF-8.
const maxKeyLength = 1024

// target is what a request addresses, path-style: /<bucket>/<key>.
type target struct {
	op          string
	bucket, key string
	unsupported *apiError // set when op is "Unsupported"
}

// route names the operation a request is, from its method, path and query, as S3 does.
func route(r *http.Request, q query) target {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	t := target{bucket: bucket, key: key}
	var allowed []string
	switch {
	case bucket == "":
		return unsupported(t, "ListBuckets")
	case key == "" && r.Method == http.MethodGet:
		if v, _ := q.get("list-type"); v != "2" {
			for _, p := range q {
				if !isAuthParam(p.name) && p.name != "x-id" {
					return unsupported(t, "?"+p.name+" on a bucket")
				}
			}
			return unsupported(t, "ListObjects (version 1)")
		}
		t.op = "ListObjectsV2"
		allowed = []string{"list-type", "prefix", "delimiter", "max-keys", "continuation-token", "start-after", "encoding-type", "fetch-owner"}
	case key == "" && r.Method == http.MethodHead:
		t.op = "HeadBucket"
	case key == "" && r.Method == http.MethodPut:
		t.op = "CreateBucket"
	case key == "" && r.Method == http.MethodPost && q.has("delete"):
		t.op = "DeleteObjects"
		allowed = []string{"delete"}
	case key == "":
		return unsupported(t, r.Method+" on a bucket")
	case r.Method == http.MethodPut:
		if r.Header.Get("X-Amz-Copy-Source") != "" {
			return unsupported(t, "CopyObject")
		}
		t.op = "PutObject"
	case r.Method == http.MethodGet:
		t.op = "GetObject"
		allowed = responseOverrides
	case r.Method == http.MethodHead:
		t.op = "HeadObject"
		allowed = responseOverrides
	case r.Method == http.MethodDelete:
		t.op = "DeleteObject"
	default:
		return unsupported(t, r.Method+" on an object")
	}
	for _, p := range q {
		if !isAuthParam(p.name) && p.name != "x-id" && !slices.Contains(allowed, p.name) {
			return unsupported(t, "?"+p.name+" on "+t.op)
		}
	}
	return t
}

func unsupported(t target, what string) target {
	t.op = "Unsupported"
	t.unsupported = errNotImplemented(what)
	return t
}

// isAuthParam is a presigned URL's own parameter (X-Amz-Signature, X-Amz-Date, …).
func isAuthParam(name string) bool { return strings.HasPrefix(strings.ToLower(name), "x-amz-") }

// responseOverrides are the query parameters with which a signed GetObject sets its
// answer's headers (a presigned GET can make a browser save a log under a file name).
var responseOverrides = []string{
	"response-cache-control", "response-content-disposition", "response-content-encoding",
	"response-content-language", "response-content-type", "response-expires",
}

// ServeHTTP answers one S3 request: it is routed, authenticated, its body read and checked
// against its signature's payload hash, and only then served.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q, qerr := parseQuery(r.URL.RawQuery)
	t := route(r, q)
	id := s.begin(t.op)
	h := w.Header()
	h.Set("X-Amz-Request-Id", id)
	h.Set("X-Amz-Id-2", id)
	h.Set("Server", "AmazonS3")
	// S3's Date is its clock: the SDK corrects its own skew from it before retrying a
	// RequestTimeTooSkewed, so it must be the clock requests are judged by.
	h.Set("Date", s.now().UTC().Format(http.TimeFormat))
	if o := r.Header.Get("Origin"); (r.Method == http.MethodGet || r.Method == http.MethodHead) && s.allowed(o) {
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Expose-Headers", "Content-Length, Content-Range, ETag")
		h.Add("Vary", "Origin")
	}
	if qerr != nil {
		s.fail(w, r, id, newError(http.StatusBadRequest, "InvalidURI", "Couldn't parse the specified URI."))
		return
	}
	c, e := s.authenticate(r, q)
	if e == nil && t.unsupported != nil {
		e = t.unsupported
	}
	var body []byte
	if e == nil {
		body, e = s.readBody(r, t)
	}
	if e == nil {
		e = checkPayload(c, body)
	}
	if e == nil {
		e = s.serve(w, r, q, t, body)
	}
	if e != nil {
		drain(r)
		s.fail(w, r, id, e)
	}
}

// drainLimit bounds how much of a refused request's body is read and thrown away.
const drainLimit = 256 << 20

// drain reads what is left of a refused request's body before the answer is written. The SDK
// sends a PutObject body without waiting for 100 Continue (its requests say Expect:
// 100-continue, but are not marked HTTP/1.1, so net/http does not wait), and so does a node
// with a presigned URL; a server that answers and closes with that body unread resets the
// connection, and the client reports the reset instead of S3's error.
func drain(r *http.Request) { _, _ = io.CopyN(io.Discard, r.Body, drainLimit) }

// serve runs the operation; it writes nothing when it returns an error.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, q query, t target, body []byte) *apiError {
	if t.op == "CreateBucket" {
		return s.createBucket(w, t, body)
	}
	if !s.store.hasBucket(t.bucket) {
		return errNoSuchBucket(t.bucket)
	}
	switch t.op {
	case "HeadBucket":
		w.Header().Set("X-Amz-Bucket-Region", s.region)
		w.WriteHeader(http.StatusOK)
		return nil
	case "PutObject":
		return s.putObject(w, r, t, body)
	case "GetObject", "HeadObject":
		return s.getObject(w, r, q, t)
	case "DeleteObject":
		if err := s.store.delete(t.bucket, t.key); err != nil {
			return errInternal(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case "DeleteObjects":
		return s.deleteObjects(w, r, t, body)
	case "ListObjectsV2":
		return s.listObjectsV2(w, q, t)
	}
	return errNotImplemented(t.op)
}

func errInternal(err error) *apiError {
	return newError(http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again. (%v)", err)
}

// readBody reads the whole body, bounded: a PutObject's by the object size limit, refused
// before it is read when its Content-Length says it is larger, as S3 refuses it.
func (s *Server) readBody(r *http.Request, t target) ([]byte, *apiError) {
	limit := int64(maxRequestBody)
	tooLarge := newError(http.StatusBadRequest, "MaxMessageLengthExceeded", "Your request was too big.")
	if t.op == "PutObject" {
		if r.ContentLength < 0 {
			return nil, newError(http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.")
		}
		limit = s.maxSize
		tooLarge = newError(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size").
			with("ProposedSize", strconv.FormatInt(r.ContentLength, 10)).
			with("MaxSizeAllowed", strconv.FormatInt(s.maxSize, 10))
	}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, newError(http.StatusBadRequest, "IncompleteBody",
			"You did not provide the number of bytes specified by the Content-Length HTTP header.")
	}
	if int64(len(body)) > limit {
		return nil, tooLarge
	}
	return body, nil
}

// keptHeaders are the request headers S3 stores with an object and answers with it.
func keptHeaders(in http.Header) http.Header {
	out := http.Header{}
	for name, values := range in {
		switch {
		case name == "Cache-Control", name == "Content-Disposition", name == "Content-Language", name == "Expires",
			name == "Content-Encoding" && values[0] != "aws-chunked",
			strings.HasPrefix(name, "X-Amz-Meta-"):
			out[name] = values
		}
	}
	return out
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, t target, body []byte) *apiError {
	if len(t.key) > maxKeyLength {
		return newError(http.StatusBadRequest, "KeyTooLongError", "Your key is too long").
			with("Size", strconv.Itoa(len(t.key))).with("MaxSizeAllowed", strconv.Itoa(maxKeyLength))
	}
	alg, sum, e := checkIntegrity(r.Header, body)
	if e != nil {
		return e
	}
	contentType := r.Header.Get("Content-Type")
	if contentType == "" {
		contentType = "binary/octet-stream"
	}
	o := &object{Body: body, ObjectInfo: ObjectInfo{
		Key: t.key, Size: int64(len(body)), ETag: etag(body), ContentType: contentType,
		LastModified:      s.now().UTC().Truncate(time.Millisecond),
		ChecksumAlgorithm: alg, Checksum: sum, Header: keptHeaders(r.Header),
	}}
	if err := s.store.put(t.bucket, o); err != nil {
		return errInternal(err)
	}
	h := w.Header()
	h.Set("ETag", o.ETag)
	if alg != "" {
		h.Set("X-Amz-Checksum-"+alg, sum)
		h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// getObject answers GetObject and HeadObject: the object's headers, the range asked for, and
// the stored checksum when the client asks (x-amz-checksum-mode: ENABLED) for the whole
// object — a part's bytes would not match it.
func (s *Server) getObject(w http.ResponseWriter, r *http.Request, q query, t target) *apiError {
	o, ok := s.store.get(t.bucket, t.key)
	if !ok {
		return errNoSuchKey(t.key)
	}
	size := o.Size
	start, end, partial, e := parseRange(r.Header.Get("Range"), size)
	if e != nil {
		return e.with("RangeRequested", r.Header.Get("Range")).with("ActualObjectSize", strconv.FormatInt(size, 10))
	}
	h := w.Header()
	for name, values := range o.Header {
		h[name] = values
	}
	h.Set("Content-Type", o.ContentType)
	h.Set("ETag", o.ETag)
	h.Set("Last-Modified", o.LastModified.Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	for _, p := range responseOverrides {
		if v, ok := q.get(p); ok {
			h.Set(strings.TrimPrefix(p, "response-"), v)
		}
	}
	status := http.StatusOK
	if partial {
		status = http.StatusPartialContent
		h.Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end-1, 10)+"/"+strconv.FormatInt(size, 10))
	} else if o.Checksum != "" && strings.EqualFold(r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") {
		h.Set("X-Amz-Checksum-"+o.ChecksumAlgorithm, o.Checksum)
		h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	}
	h.Set("Content-Length", strconv.FormatInt(end-start, 10))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(o.Body[start:end])
	}
	return nil
}

// parseRange reads a Range header of one byte range — bytes=N-, bytes=N-M, bytes=-N — as
// [start, end) of an object of size bytes. A header it cannot read, or of several ranges, is
// ignored and the whole object answered, as RFC 9110 has it; a range that starts past the
// end is InvalidRange (416).
func parseRange(header string, size int64) (start, end int64, partial bool, e *apiError) {
	spec, ok := strings.CutPrefix(header, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, size, false, nil
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, size, false, nil
	}
	unsatisfiable := newError(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable")
	if first == "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return 0, size, false, nil
		}
		if n == 0 || size == 0 {
			return 0, 0, false, unsatisfiable
		}
		return max(size-n, 0), size, true, nil
	}
	from, err := strconv.ParseInt(first, 10, 64)
	if err != nil || from < 0 {
		return 0, size, false, nil
	}
	to := size - 1
	if last != "" {
		if to, err = strconv.ParseInt(last, 10, 64); err != nil || to < from {
			return 0, size, false, nil
		}
	}
	if from >= size {
		return 0, 0, false, unsatisfiable
	}
	return from, min(to+1, size), true, nil
}

func (s *Server) createBucket(w http.ResponseWriter, t target, body []byte) *apiError {
	if !validBucketName(t.bucket) {
		return newError(http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid.").with("BucketName", t.bucket)
	}
	if len(body) > 0 {
		var conf struct {
			LocationConstraint string
		}
		if err := xml.Unmarshal(body, &conf); err != nil {
			return errMalformedXML()
		}
		if conf.LocationConstraint != "" && conf.LocationConstraint != s.region {
			return newError(http.StatusBadRequest, "IllegalLocationConstraintException",
				"The %s location constraint is incompatible for the region specific endpoint this request was sent to.", conf.LocationConstraint)
		}
	}
	created, err := s.store.createBucket(t.bucket)
	if err != nil {
		return errInternal(err)
	}
	if !created {
		return newError(http.StatusConflict, "BucketAlreadyOwnedByYou",
			"Your previous request to create the named bucket succeeded and you already own it.").with("BucketName", t.bucket)
	}
	w.Header().Set("Location", "/"+t.bucket)
	w.WriteHeader(http.StatusOK)
	return nil
}

const xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"

// writeXML answers 200 with an XML document, as S3 answers its bucket operations.
func writeXML(w http.ResponseWriter, v any) *apiError {
	b, err := xml.Marshal(v)
	if err != nil {
		return errInternal(err)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(b)
	return nil
}

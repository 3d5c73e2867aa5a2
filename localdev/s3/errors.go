package s3

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"
)

// apiError is an S3 error answer: its status, its code (what the SDK surfaces as
// ErrorCode()), its message, and the extra elements S3 adds for that code.
type apiError struct {
	status  int
	code    string
	message string
	extra   [][2]string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// with adds an element after Message, as S3 adds <Key>, <HeadersNotSigned>, ….
func (e *apiError) with(name, value string) *apiError {
	e.extra = append(e.extra, [2]string{name, value})
	return e
}

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// The errors S3 answers, with S3's statuses and messages.

func errAccessDenied(msg string) *apiError {
	return newError(http.StatusForbidden, "AccessDenied", "%s", msg)
}

func errSignatureDoesNotMatch() *apiError {
	return newError(http.StatusForbidden, "SignatureDoesNotMatch",
		"The request signature we calculated does not match the signature you provided. Check your key and signing method.")
}

func errInvalidAccessKeyID(key string) *apiError {
	return newError(http.StatusForbidden, "InvalidAccessKeyId",
		"The AWS Access Key Id you provided does not exist in our records.").with("AWSAccessKeyId", key)
}

func errHeaderMalformed(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "AuthorizationHeaderMalformed", "The authorization header is malformed; "+format, args...)
}

func errQueryMalformed(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "AuthorizationQueryParametersError", format, args...)
}

func errInvalidRequest(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "InvalidRequest", format, args...)
}

func errInvalidArgument(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "InvalidArgument", format, args...)
}

func errNotImplemented(what string) *apiError {
	return newError(http.StatusNotImplemented, "NotImplemented",
		"A header you provided implies functionality that is not implemented").with("Header", what)
}

func errNoSuchBucket(bucket string) *apiError {
	return newError(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist").with("BucketName", bucket)
}

func errNoSuchKey(key string) *apiError {
	return newError(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.").with("Key", key)
}

func errMalformedXML() *apiError {
	return newError(http.StatusBadRequest, "MalformedXML",
		"The XML you provided was not well-formed or did not validate against our published schema")
}

// fail writes e as S3 does: an XML <Error> document, except for HEAD, whose answers have no
// body (the SDK then reads the status alone: 404 becomes NotFound).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, requestID string, e *apiError) {
	s.countRefusal(e.code)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	if r.Method == http.MethodHead {
		w.WriteHeader(e.status)
		return
	}
	var b strings.Builder
	b.WriteString(xml.Header)
	b.WriteString("<Error>")
	element(&b, "Code", e.code)
	element(&b, "Message", e.message)
	for _, kv := range e.extra {
		element(&b, kv[0], kv[1])
	}
	element(&b, "Resource", r.URL.Path)
	element(&b, "RequestId", requestID)
	b.WriteString("</Error>")
	h.Set("Content-Length", fmt.Sprint(b.Len()))
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(b.String()))
}

func element(b *strings.Builder, name, value string) {
	b.WriteString("<" + name + ">")
	_ = xml.EscapeText(b, []byte(value))
	b.WriteString("</" + name + ">")
}

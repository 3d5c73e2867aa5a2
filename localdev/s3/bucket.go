package s3

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// maxListKeys is the most ListObjectsV2 answers in one page, whatever max-keys asks.
const maxListKeys = 1000

// maxDeleteKeys is the most keys one DeleteObjects may name.
const maxDeleteKeys = 1000

type listResult struct {
	XMLName               xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string
	Prefix                string
	Delimiter             string `xml:",omitempty"`
	MaxKeys               int
	KeyCount              int
	IsTruncated           bool
	ContinuationToken     string `xml:",omitempty"`
	NextContinuationToken string `xml:",omitempty"`
	StartAfter            string `xml:",omitempty"`
	EncodingType          string `xml:",omitempty"`
	Contents              []listEntry
	CommonPrefixes        []commonPrefix
}

type listEntry struct {
	Key               string
	LastModified      string
	ETag              string
	ChecksumAlgorithm string `xml:",omitempty"`
	ChecksumType      string `xml:",omitempty"`
	Size              int64
	StorageClass      string
}

type commonPrefix struct{ Prefix string }

// listParams are ListObjectsV2's query parameters, checked as S3 checks them.
type listParams struct {
	prefix, delimiter, token, startAfter, encoding string
	maxKeys                                        int
	after                                          cursor
}

func readListParams(q query) (listParams, *apiError) {
	p := listParams{maxKeys: maxListKeys}
	p.prefix, _ = q.get("prefix")
	p.delimiter, _ = q.get("delimiter")
	p.startAfter, _ = q.get("start-after")
	p.encoding, _ = q.get("encoding-type")
	if p.encoding != "" && p.encoding != "url" {
		return p, errInvalidArgument("Invalid Encoding Method specified in Request").with("ArgumentName", "encoding-type")
	}
	if v, ok := q.get("max-keys"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, errInvalidArgument("Provided max-keys not an integer or within integer range").
				with("ArgumentName", "max-keys").with("ArgumentValue", v)
		}
		p.maxKeys = n
	}
	var ok bool
	if p.token, ok = q.get("continuation-token"); ok {
		if p.after, ok = decodeCursor(p.token); !ok {
			return p, errInvalidArgument("The continuation token provided is incorrect").with("ArgumentName", "continuation-token")
		}
	} else if p.startAfter != "" {
		// A continuation token carries on past StartAfter already; only a first page starts at it.
		p.after = cursor{last: p.startAfter}
	}
	return p, nil
}

// cursor is where a page ended: its last key, or its last common prefix, past every key
// rolled up in it (they sort together, right after the prefix itself).
type cursor struct {
	last     string
	isPrefix bool
}

func (c cursor) passes(key string) bool {
	return key > c.last && !(c.isPrefix && strings.HasPrefix(key, c.last))
}

// encode makes the continuation token: opaque to clients, as S3's are.
func (c cursor) encode() string {
	kind := "k"
	if c.isPrefix {
		kind = "p"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(kind + c.last))
}

func decodeCursor(token string) (cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) == 0 || (b[0] != 'k' && b[0] != 'p') {
		return cursor{}, false
	}
	return cursor{last: string(b[1:]), isPrefix: b[0] == 'p'}, true
}

// listObjectsV2 pages through a bucket's keys in order: those under prefix, past the cursor,
// keys that share a segment up to delimiter rolled up into one common prefix each, counted
// as one toward max-keys.
func (s *Server) listObjectsV2(w http.ResponseWriter, q query, t target) *apiError {
	p, e := readListParams(q)
	if e != nil {
		return e
	}
	out := listResult{
		Name: t.bucket, Prefix: p.prefix, Delimiter: p.delimiter, MaxKeys: p.maxKeys,
		ContinuationToken: p.token, StartAfter: p.startAfter, EncodingType: p.encoding,
	}
	limit := min(p.maxKeys, maxListKeys)
	var last cursor
	for _, o := range s.store.list(t.bucket) {
		if !strings.HasPrefix(o.Key, p.prefix) || (p.after.last != "" && !p.after.passes(o.Key)) {
			continue
		}
		item := cursor{last: o.Key}
		if p.delimiter != "" {
			if i := strings.Index(o.Key[len(p.prefix):], p.delimiter); i >= 0 {
				item = cursor{last: o.Key[:len(p.prefix)+i+len(p.delimiter)], isPrefix: true}
				if item == last {
					continue
				}
			}
		}
		if out.KeyCount == limit {
			// With max-keys=0 nothing is listed and nothing said to follow: a token that
			// resumes from nowhere would have a paginator ask forever.
			out.IsTruncated = limit > 0
			break
		}
		out.KeyCount++
		last = item
		if item.isPrefix {
			out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: item.last})
		} else {
			out.Contents = append(out.Contents, entry(o))
		}
	}
	if out.IsTruncated {
		out.NextContinuationToken = last.encode()
	}
	if p.encoding == "url" {
		encodeListResult(&out)
	}
	return writeXML(w, out)
}

func entry(o ObjectInfo) listEntry {
	e := listEntry{
		Key: o.Key, LastModified: o.LastModified.UTC().Format("2006-01-02T15:04:05.000Z"),
		ETag: o.ETag, Size: o.Size, StorageClass: "STANDARD",
	}
	if o.ChecksumAlgorithm != "" {
		e.ChecksumAlgorithm, e.ChecksumType = checksums[o.ChecksumAlgorithm].name, "FULL_OBJECT"
	}
	return e
}

// encodeListResult applies encoding-type=url: what names keys is URL-encoded, so a key with
// characters XML 1.0 cannot carry still lists.
func encodeListResult(out *listResult) {
	out.Prefix = url.QueryEscape(out.Prefix)
	out.Delimiter = url.QueryEscape(out.Delimiter)
	out.StartAfter = url.QueryEscape(out.StartAfter)
	for i := range out.Contents {
		out.Contents[i].Key = url.QueryEscape(out.Contents[i].Key)
	}
	for i := range out.CommonPrefixes {
		out.CommonPrefixes[i].Prefix = url.QueryEscape(out.CommonPrefixes[i].Prefix)
	}
}

type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Quiet   bool     `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name        `xml:"http://s3.amazonaws.com/doc/2006-03-01/ DeleteResult"`
	Deleted []deletedEntry  `xml:"Deleted"`
	Errors  []deleteFailure `xml:"Error"`
}

type deletedEntry struct{ Key string }

type deleteFailure struct {
	Key, VersionId, Code, Message string
}

// deleteObjects is the batch delete: S3 wants its body's integrity proven (Content-MD5 or an
// x-amz-checksum-*), deletes each key (one that is not there counts as deleted), and in quiet
// mode reports only failures.
func (s *Server) deleteObjects(w http.ResponseWriter, r *http.Request, t target, body []byte) *apiError {
	if !hasDigest(r.Header) {
		return errInvalidRequest("Missing required header for this request: Content-MD5 OR x-amz-checksum-*")
	}
	if _, _, e := checkIntegrity(r.Header, body); e != nil {
		return e
	}
	var in deleteRequest
	if err := xml.Unmarshal(body, &in); err != nil || len(in.Objects) == 0 || len(in.Objects) > maxDeleteKeys {
		return errMalformedXML()
	}
	var out deleteResult
	for _, o := range in.Objects {
		switch {
		case o.VersionID != "":
			out.Errors = append(out.Errors, deleteFailure{Key: o.Key, VersionId: o.VersionID, Code: "NotImplemented", Message: "versions are not kept here"})
		case s.store.delete(t.bucket, o.Key) != nil:
			out.Errors = append(out.Errors, deleteFailure{Key: o.Key, Code: "InternalError", Message: "We encountered an internal error. Please try again."})
		case !in.Quiet:
			out.Deleted = append(out.Deleted, deletedEntry{Key: o.Key})
		}
	}
	return writeXML(w, out)
}

// hasDigest is whether a request proves its body: Content-MD5, or an x-amz-checksum-* value.
func hasDigest(h http.Header) bool {
	if _, ok := h["Content-Md5"]; ok {
		return true
	}
	alg, value, _ := sentChecksum(h)
	return alg != "" && value != ""
}

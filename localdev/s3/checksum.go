package s3

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"net/http"
	"strings"
)

// checksums are the x-amz-checksum-<name> algorithms S3 verifies, by the header's suffix.
var checksums = map[string]struct {
	name string // as x-amz-sdk-checksum-algorithm and S3's messages spell it
	new  func() hash.Hash
}{
	"crc32":  {"CRC32", func() hash.Hash { return crc32.NewIEEE() }},
	"crc32c": {"CRC32C", func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) }},
	// The NVMe polynomial 0xad93d23594c93659, bit-reversed as crc64.MakeTable wants it.
	"crc64nvme": {"CRC64NVME", func() hash.Hash { return crc64.New(crc64.MakeTable(0x9a6c9329ac4bc9b5)) }},
	"sha1":      {"SHA1", sha1.New},
	"sha256":    {"SHA256", sha256.New},
}

// checkPayload holds the body to the x-amz-content-sha256 the signature covered, so a body
// swapped under a header-signed request is refused though its signature is right.
func checkPayload(c *claim, body []byte) *apiError {
	if c.payloadHash == unsignedPayload {
		return nil
	}
	sum := sha256.Sum256(body)
	got := hex.EncodeToString(sum[:])
	if !strings.EqualFold(got, c.payloadHash) {
		return newError(http.StatusBadRequest, "XAmzContentSHA256Mismatch",
			"The provided 'x-amz-content-sha256' header does not match what was computed.").
			with("ClientComputedContentSHA256", c.payloadHash).with("S3ComputedContentSHA256", got)
	}
	return nil
}

// checkIntegrity verifies a body against the digests sent with it, Content-MD5 and one
// x-amz-checksum-*, as S3 does before storing anything. It returns the checksum to keep with
// the object (lower-case algorithm and base64 value), computed here when the client named an
// algorithm (x-amz-sdk-checksum-algorithm) but sent no value.
func checkIntegrity(h http.Header, body []byte) (alg, value string, e *apiError) {
	if e := checkContentMD5(h, body); e != nil {
		return "", "", e
	}
	alg, sent, e := sentChecksum(h)
	if e != nil || alg == "" {
		return "", "", e
	}
	hh := checksums[alg].new()
	hh.Write(body)
	got := hh.Sum(nil)
	if sent == "" {
		return alg, base64.StdEncoding.EncodeToString(got), nil
	}
	want, err := base64.StdEncoding.DecodeString(sent)
	if err != nil || len(want) != len(got) {
		return "", "", errInvalidRequest("Value for x-amz-checksum-%s header is invalid.", alg)
	}
	if !bytes.Equal(want, got) {
		return "", "", newError(http.StatusBadRequest, "BadDigest",
			"The %s you specified did not match the calculated checksum.", checksums[alg].name)
	}
	return alg, sent, nil
}

func checkContentMD5(h http.Header, body []byte) *apiError {
	values, sent := h["Content-Md5"]
	if !sent {
		return nil
	}
	want, err := base64.StdEncoding.DecodeString(strings.TrimSpace(values[0]))
	if err != nil || len(want) != md5.Size {
		return newError(http.StatusBadRequest, "InvalidDigest", "The Content-MD5 you specified was invalid.").
			with("Content-MD5", values[0])
	}
	got := md5.Sum(body)
	if !bytes.Equal(want, got[:]) {
		return newError(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.").
			with("ExpectedDigest", values[0]).with("CalculatedDigest", base64.StdEncoding.EncodeToString(got[:]))
	}
	return nil
}

// sentChecksum is the one x-amz-checksum-<alg> header sent (x-amz-checksum-mode and -type
// are not checksums), or the algorithm x-amz-sdk-checksum-algorithm names with no value.
func sentChecksum(h http.Header) (alg, value string, e *apiError) {
	for name, values := range h {
		a, ok := strings.CutPrefix(strings.ToLower(name), "x-amz-checksum-")
		if _, known := checksums[a]; !ok || !known {
			continue
		}
		if alg != "" {
			return "", "", errInvalidRequest("Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
		}
		alg, value = a, strings.TrimSpace(values[0])
		if value == "" {
			return "", "", errInvalidRequest("Value for x-amz-checksum-%s header is invalid.", a)
		}
	}
	named := strings.ToLower(h.Get("X-Amz-Sdk-Checksum-Algorithm"))
	switch {
	case named == "" || named == alg:
		return alg, value, nil
	case alg == "":
		if _, known := checksums[named]; known {
			return named, "", nil
		}
	}
	return "", "", errInvalidRequest("Value for x-amz-sdk-checksum-algorithm header is invalid.")
}

// etag is S3's ETag of a single-part object: its MD5 in hex, quoted.
func etag(body []byte) string {
	sum := md5.Sum(body)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

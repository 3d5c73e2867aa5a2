package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ObjectInfo is what the server keeps of an object besides its body.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string // the body's MD5 in hex, quoted, as S3 answers it
	ContentType  string
	LastModified time.Time
	// ChecksumAlgorithm and Checksum are the x-amz-checksum-* the object was put with (verified
	// then), answered again to GetObject and HeadObject with x-amz-checksum-mode: ENABLED.
	ChecksumAlgorithm string `json:",omitempty"`
	Checksum          string `json:",omitempty"`
	// Header holds the other headers S3 keeps with an object: Cache-Control,
	// Content-Disposition, Content-Encoding, Content-Language, Expires and x-amz-meta-*.
	Header http.Header `json:",omitempty"`
}

func (o ObjectInfo) clone() ObjectInfo {
	o.Header = o.Header.Clone()
	return o
}

type object struct {
	ObjectInfo
	Body []byte
}

// store holds buckets and their objects in memory and, when dir is set, in dir as well:
// dir/<bucket>/<sha256 of key>.json beside .body, so any key maps to a safe file name.
type store struct {
	dir     string
	mu      sync.Mutex
	buckets map[string]map[string]*object
}

func openStore(dir string) (*store, error) {
	st := &store{dir: dir, buckets: map[string]map[string]*object{}}
	if dir == "" {
		return st, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && validBucketName(e.Name()) {
			if err := st.load(e.Name()); err != nil {
				return nil, err
			}
		}
	}
	return st, nil
}

// load reads one bucket's objects from dir.
func (st *store) load(bucket string) error {
	objects := map[string]*object{}
	st.buckets[bucket] = objects
	metas, err := filepath.Glob(filepath.Join(st.dir, bucket, "*.json"))
	if err != nil {
		return err
	}
	for _, meta := range metas {
		b, err := os.ReadFile(meta)
		if err != nil {
			return err
		}
		o := &object{}
		if err := json.Unmarshal(b, &o.ObjectInfo); err != nil {
			return fmt.Errorf("s3: %s: %w", meta, err)
		}
		if o.Body, err = os.ReadFile(strings.TrimSuffix(meta, ".json") + ".body"); err != nil {
			return err
		}
		objects[o.Key] = o
	}
	return nil
}

func (st *store) createBucket(name string) (created bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.buckets[name]; ok {
		return false, nil
	}
	if st.dir != "" {
		if err := os.MkdirAll(filepath.Join(st.dir, name), 0o755); err != nil {
			return false, err
		}
	}
	st.buckets[name] = map[string]*object{}
	return true, nil
}

func (st *store) hasBucket(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.buckets[name]
	return ok
}

var errNoBucket = errors.New("no such bucket")

func (st *store) put(bucket string, o *object) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	objects, ok := st.buckets[bucket]
	if !ok {
		return errNoBucket
	}
	if st.dir != "" {
		if err := st.write(bucket, o); err != nil {
			return err
		}
	}
	objects[o.Key] = o
	return nil
}

// write puts an object's body, then its metadata, each by rename, so a reader of the
// directory never meets a half-written file.
func (st *store) write(bucket string, o *object) error {
	meta, err := json.Marshal(o.ObjectInfo)
	if err != nil {
		return err
	}
	base := st.path(bucket, o.Key)
	if err := writeFileAtomic(base+".body", o.Body); err != nil {
		return err
	}
	return writeFileAtomic(base+".json", meta)
}

func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func (st *store) path(bucket, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(st.dir, bucket, hex.EncodeToString(sum[:]))
}

func (st *store) get(bucket, key string) (*object, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	o, ok := st.buckets[bucket][key]
	return o, ok
}

// delete removes a key; a key that is not there is no error, as in S3.
func (st *store) delete(bucket, key string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	objects, ok := st.buckets[bucket]
	if !ok {
		return errNoBucket
	}
	if _, ok := objects[key]; !ok {
		return nil
	}
	if st.dir != "" {
		base := st.path(bucket, key)
		for _, name := range []string{base + ".json", base + ".body"} {
			if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	delete(objects, key)
	return nil
}

// list is a bucket's objects in S3's order: by key, byte by byte (UTF-8 binary order).
func (st *store) list(bucket string) []ObjectInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	objects := st.buckets[bucket]
	out := make([]ObjectInfo, 0, len(objects))
	for _, o := range objects {
		out = append(out, o.ObjectInfo.clone())
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// validBucketName is S3's rule for new buckets' names: 3 to 63 lower-case letters, digits,
// dots and hyphens, starting and ending with a letter or digit.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && ((c != '.' && c != '-') || i == 0 || i == len(name)-1) {
			return false
		}
	}
	return true
}

// Package request decodes and validates every request body Mediator accepts. A body is parsed
// into a tree first — refusing duplicate keys, trailing data, NUL characters, invalid UTF-8,
// lone surrogate escapes, numbers that do not fit a double and absurd nesting, none of which
// encoding/json refuses — and then read field by field, so a 400 lists every problem with its
// path instead of the first one.
package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"mediator/shared/problem"
)

// maxDepth bounds nesting anywhere in a body: PostgreSQL's jsonb parser recurses, and a body
// a thousand levels deep is not a spec anyone meant to send.
const maxDepth = 32

// parse reads one JSON document. A syntax problem is reported at the document's root path,
// with the byte offset, because there is no field to blame yet.
func parse(body []byte) (any, []problem.FieldError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	p := &parser{dec: dec, body: body}
	v, err := p.value("", 0)
	if err != nil {
		return nil, []problem.FieldError{err.field()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, []problem.FieldError{{Path: "", Message: "unexpected data after the JSON document"}}
	}
	return v, nil
}

type parseError struct {
	path, msg string
}

func (e *parseError) field() problem.FieldError {
	return problem.FieldError{Path: e.path, Message: e.msg}
}

// parser walks the decoder's tokens, keeping the body so a string can be checked as it was
// written: encoding/json turns invalid UTF-8 and lone surrogate escapes into U+FFFD without
// an error, and that would store a text the client never sent.
type parser struct {
	dec  *json.Decoder
	body []byte
}

// token is the next token and the bytes it was read from (with any separator before it).
func (p *parser) token() (json.Token, []byte, error) {
	start := p.dec.InputOffset()
	tok, err := p.dec.Token()
	return tok, p.body[start:p.dec.InputOffset()], err
}

func (p *parser) value(path string, depth int) (any, *parseError) {
	if depth > maxDepth {
		return nil, &parseError{path, fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	tok, raw, err := p.token()
	if err != nil {
		return nil, p.syntaxError(path, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			return p.object(path, depth)
		}
		if t == '[' {
			return p.array(path, depth)
		}
		return nil, &parseError{path, "malformed JSON"}
	case string:
		if msg := badText(raw); msg != "" {
			return nil, &parseError{path, msg}
		}
		if strings.ContainsRune(t, 0) {
			return nil, &parseError{path, "must not contain NUL characters"}
		}
		return t, nil
	case json.Number:
		if !storable(t) {
			return nil, &parseError{path, "number out of range (at most 100 characters, magnitude within a double's)"}
		}
		return t, nil
	default: // bool, nil
		return t, nil
	}
}

// object reads an object's members. A key that cannot be kept as sent is blamed on the
// object: a path could not name it.
func (p *parser) object(path string, depth int) (any, *parseError) {
	m := map[string]any{}
	for p.dec.More() {
		tok, raw, err := p.token()
		if err != nil {
			return nil, p.syntaxError(path, err)
		}
		if msg := badText(raw); msg != "" {
			return nil, &parseError{path, "a key " + msg}
		}
		key, _ := tok.(string)
		kp := join(path, key)
		if strings.ContainsRune(key, 0) {
			return nil, &parseError{path, "a key must not contain NUL characters"}
		}
		if _, dup := m[key]; dup {
			return nil, &parseError{kp, "duplicate key"}
		}
		v, perr := p.value(kp, depth+1)
		if perr != nil {
			return nil, perr
		}
		m[key] = v
	}
	if _, err := p.dec.Token(); err != nil {
		return nil, p.syntaxError(path, err)
	}
	return m, nil
}

func (p *parser) array(path string, depth int) (any, *parseError) {
	var a []any
	for p.dec.More() {
		v, perr := p.value(fmt.Sprintf("%s[%d]", path, len(a)), depth+1)
		if perr != nil {
			return nil, perr
		}
		a = append(a, v)
	}
	if _, err := p.dec.Token(); err != nil {
		return nil, p.syntaxError(path, err)
	}
	if a == nil {
		a = []any{}
	}
	return a, nil
}

func (p *parser) syntaxError(path string, err error) *parseError {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &parseError{path, "the JSON ends too early"}
	}
	return &parseError{path, fmt.Sprintf("malformed JSON near byte %d", p.dec.InputOffset())}
}

// badText says why a string's JSON text, as the decoder read it, would not decode to the
// characters sent ("" when it would): bytes that are not UTF-8, or a \uXXXX escape of half
// a surrogate pair without the other half. The decoder has checked the escapes' syntax.
func badText(raw []byte) string {
	if !utf8.Valid(raw) {
		return "must be valid UTF-8"
	}
	const lone = `must not contain a lone UTF-16 surrogate (a \ud800-\udfff escape without its pair)`
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: a second backslash is skipped with it
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		i += 4
		switch {
		case r >= 0xd800 && r < 0xdc00: // high: a low escape must follow at once
			if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(raw[i+3:]); lo >= 0xdc00 && lo < 0xe000 {
					i += 6
					continue
				}
			}
			return lone
		case r >= 0xdc00 && r < 0xe000:
			return lone
		}
	}
	return ""
}

// hex4 is the value of the four hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(n)
}

// plainKey is a key a path can carry as it is; any other key is written in bracket form,
// quoted as JSON (steps[0].spec["a b"]), so an unknown field named "steps[0].id" is never
// reported as if the client's step id were wrong.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// storable reports whether PostgreSQL's jsonb will take the number as written: it parses
// the literal itself, so 1e-20000 (which a double rounds to 0) or 0e9999999999 are refused
// there — a 500 — unless refused here.
func storable(n json.Number) bool {
	lit := string(n)
	if len(lit) > 100 {
		return false
	}
	if f, err := strconv.ParseFloat(lit, 64); err != nil || math.IsInf(f, 0) {
		return false
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		return err == nil && exp >= -308 && exp <= 308
	}
	return true
}

// item is the path of element i of the array at key under path.
func item(path, key string, i int) string { return fmt.Sprintf("%s[%d]", join(path, key), i) }

func join(path, key string) string {
	if !plainKey.MatchString(key) {
		q, _ := json.Marshal(key)
		return path + "[" + string(q) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// object reads the fields of one JSON object, collecting problems by path. done() reports
// the fields nobody asked for: unknown fields are refused, not ignored.
type object struct {
	path string
	m    map[string]any
	errs *[]problem.FieldError
	read map[string]bool
}

// root parses a request body whose top level must be an object, and opens it; nil when the
// body is not one, with the reasons in errs.
func root(body []byte, errs *[]problem.FieldError) *object {
	tree, perrs := parse(body)
	if perrs != nil {
		*errs = perrs
		return nil
	}
	return newObject(tree, "", errs)
}

func newObject(v any, path string, errs *[]problem.FieldError) *object {
	m, ok := v.(map[string]any)
	if !ok {
		*errs = append(*errs, problem.FieldError{Path: path, Message: "must be a JSON object"})
		return nil
	}
	return &object{path: path, m: m, errs: errs, read: map[string]bool{}}
}

// fail reports a problem with the field key of this object.
func (o *object) fail(key, msg string) { o.failAt(join(o.path, key), msg) }

// failAt reports a problem at a path built with join and item.
func (o *object) failAt(path, msg string) {
	*o.errs = append(*o.errs, problem.FieldError{Path: path, Message: msg})
}

// get returns a field that is present and not null.
func (o *object) get(key string, required bool) (any, bool) {
	o.read[key] = true
	v, ok := o.m[key]
	if !ok || v == nil {
		if required {
			o.fail(key, "is required")
		}
		return nil, false
	}
	return v, true
}

func (o *object) str(key string, required bool) (string, bool) {
	v, ok := o.get(key, required)
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		o.fail(key, "must be a string")
		return "", false
	}
	return s, true
}

func (o *object) boolean(key string) bool {
	v, ok := o.get(key, false)
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	if !isBool {
		o.fail(key, "must be true or false")
	}
	return b
}

// integer reads a whole number within [lo, hi]; absent (or null) is def.
func (o *object) integer(key string, def, lo, hi int64) (int64, bool) {
	v, ok := o.get(key, false)
	if !ok {
		return def, false
	}
	n, isNum := v.(json.Number)
	i, err := n.Int64()
	if !isNum || err != nil || i < lo || i > hi {
		o.fail(key, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
		return def, false
	}
	return i, true
}

func (o *object) array(key string, required bool, maxLen int) ([]any, bool) {
	v, ok := o.get(key, required)
	if !ok {
		return nil, false
	}
	a, isArr := v.([]any)
	if !isArr {
		o.fail(key, "must be an array")
		return nil, false
	}
	if len(a) > maxLen {
		o.fail(key, fmt.Sprintf("must have at most %d items", maxLen))
		return nil, false
	}
	return a, true
}

// raw re-encodes a field's JSON (canonically: sorted keys) and checks its size.
func (o *object) raw(key string, maxBytes int, mustBeObject bool) (json.RawMessage, bool) {
	v, ok := o.get(key, false)
	if !ok {
		return nil, false
	}
	if _, isObj := v.(map[string]any); mustBeObject && !isObj {
		o.fail(key, "must be a JSON object")
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		o.fail(key, "cannot be encoded")
		return nil, false
	}
	if len(b) > maxBytes {
		o.fail(key, fmt.Sprintf("must be at most %d bytes of JSON", maxBytes))
		return nil, false
	}
	return b, true
}

func (o *object) done() {
	var unknown []string
	for k := range o.m {
		if !o.read[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		o.fail(k, "unknown field")
	}
}

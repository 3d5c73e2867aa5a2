package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// runFile is a run file made ready to submit: the JSON body, and its run_id.
type runFile struct {
	body      []byte
	runID     string
	generated bool // the run_id was made here (the file and the flag gave none)
}

// loadRun turns a run file — YAML or JSON, the body POST /v1/runs takes — into the JSON body
// to send, with its run_id: the file's, else flagID, else newID(). A flag that differs from
// the file's run_id is refused.
//
// JSON is sent as written (with the run_id spliced in when it had none), so the API judges
// exactly what the file says. YAML becomes the JSON of the same values, numbers kept as they
// were written: the API fingerprints a run by its decoded values and its numbers' text, so the
// YAML and the JSON of one run are the same request, and submitting either again answers 200.
func loadRun(data []byte, flagID string, newID func() string) (runFile, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if len(bytes.TrimSpace(data)) == 0 {
		return runFile{}, errors.New("the run file is empty")
	}
	if trimmed := bytes.TrimSpace(data); trimmed[0] == '{' && json.Valid(trimmed) {
		return jsonRun(trimmed, flagID, newID)
	}
	doc, err := yamlValue(data)
	if err != nil {
		return runFile{}, err
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return runFile{}, errors.New("the run file must be one object (a YAML mapping or a JSON object)")
	}
	f := runFile{}
	switch v, present := obj["run_id"]; {
	case !present || v == nil:
		f.runID, f.generated = pick(flagID, newID)
		obj["run_id"] = f.runID
	default:
		s, isString := v.(string)
		if !isString {
			return runFile{}, fmt.Errorf("run_id in the file must be a string, not %v", v)
		}
		if flagID != "" && flagID != s {
			return runFile{}, fmt.Errorf("--run-id %q differs from the file's run_id %q", flagID, s)
		}
		f.runID = s
	}
	if f.body, err = json.Marshal(obj); err != nil {
		return runFile{}, err
	}
	return f, nil
}

// withPriority sets the run's priority from --priority; a file that names another is refused,
// as a --run-id that differs from the file's is.
func withPriority(f runFile, priority int) (runFile, error) {
	return withNumber(f, "priority", "--priority", priority)
}

// withNumber is f with key set to n from flag, unless the file gives the same; a file that
// gives another is an error.
func withNumber(f runFile, key, flag string, n int) (runFile, error) {
	dec := json.NewDecoder(bytes.NewReader(f.body))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return f, err
	}
	if v, present := obj[key]; present && v != nil {
		if got, ok := v.(json.Number); !ok || got.String() != strconv.Itoa(n) {
			return f, fmt.Errorf("%s %d differs from the file's %s %v", flag, n, key, v)
		}
		return f, nil
	}
	obj[key] = n
	body, err := json.Marshal(obj)
	f.body = body
	return f, err
}

func pick(flagID string, newID func() string) (string, bool) {
	if flagID != "" {
		return flagID, false
	}
	return newID(), true
}

// jsonRun reads a JSON run's run_id and, when it has none, writes one in as the object's first
// member, leaving every other byte as it was. A null run_id is one to fill in.
func jsonRun(data []byte, flagID string, newID func() string) (runFile, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return runFile{}, err
	}
	raw, present := top["run_id"]
	if present && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return runFile{}, fmt.Errorf("run_id in the file must be a string, not %s", raw)
		}
		if flagID != "" && flagID != s {
			return runFile{}, fmt.Errorf("--run-id %q differs from the file's run_id %q", flagID, s)
		}
		return runFile{body: data, runID: s}, nil
	}
	id, generated := pick(flagID, newID)
	if present {
		// "run_id": null, as a template leaves it: rewritten whole, its numbers as written.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return runFile{}, err
		}
		obj["run_id"] = id
		body, err := json.Marshal(obj)
		return runFile{body: body, runID: id, generated: generated}, err
	}
	quoted, _ := json.Marshal(id)
	open := bytes.IndexByte(data, '{') + 1
	member := append([]byte(`"run_id":`), quoted...)
	if len(top) > 0 {
		member = append(member, ',')
	}
	body := append(append(append([]byte{}, data[:open]...), member...), data[open:]...)
	return runFile{body: body, runID: id, generated: generated}, nil
}

// yamlValue decodes one YAML document into JSON's values: objects, arrays, strings, booleans,
// null, and numbers as json.Number in the text they were written in when that is JSON's.
func yamlValue(data []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the run file is neither JSON nor YAML: %w", err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, errors.New("the run file holds more than one YAML document")
	}
	return fromYAML(&doc, "")
}

// jsonNumber is a number as JSON writes it.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func fromYAML(n *yaml.Node, path string) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromYAML(n.Content[0], path)
	case yaml.AliasNode:
		return fromYAML(n.Alias, path)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, err := fromYAML(item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		return mapping(n, path)
	case yaml.ScalarNode:
		return scalar(n, path)
	}
	return nil, fmt.Errorf("%s: a YAML node of an unknown kind", where(path, n))
}

// mapping decodes a YAML mapping into an object. Merge keys (<<) bring in the members the
// mapping does not set itself; a key given twice is refused, as the API refuses it in JSON.
func mapping(n *yaml.Node, path string) (map[string]any, error) {
	out := map[string]any{}
	var merged []map[string]any
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			sources := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				sources = v.Content
			}
			for _, src := range sources {
				m, err := fromYAML(src, path)
				if err != nil {
					return nil, err
				}
				obj, ok := m.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: a merge (<<) must name mappings", where(path, k))
				}
				merged = append(merged, obj)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s: a key must be a plain value, not a list or a mapping", where(path, k))
		}
		key := k.Value
		sub := key
		if path != "" {
			sub = path + "." + key
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s: %q is given twice", where(path, k), key)
		}
		val, err := fromYAML(v, sub)
		if err != nil {
			return nil, err
		}
		out[key] = val
	}
	for _, m := range merged {
		for k, v := range m {
			if _, set := out[k]; !set {
				out[k] = v
			}
		}
	}
	return out, nil
}

func scalar(n *yaml.Node, path string) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("%s: %w", where(path, n), err)
		}
		return b, nil
	case "!!int", "!!float":
		if jsonNumber.MatchString(n.Value) {
			return json.Number(n.Value), nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", where(path, n), err)
		}
		switch x := v.(type) {
		case int:
			return json.Number(strconv.Itoa(x)), nil
		case int64:
			return json.Number(strconv.FormatInt(x, 10)), nil
		case uint64:
			return json.Number(strconv.FormatUint(x, 10)), nil
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return nil, fmt.Errorf("%s: %s is not a number JSON can carry", where(path, n), n.Value)
			}
			return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
		}
		return nil, fmt.Errorf("%s: %s is not a number", where(path, n), n.Value)
	case "!!binary":
		if _, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), "")); err != nil {
			return nil, fmt.Errorf("%s: %w", where(path, n), err)
		}
		return strings.Join(strings.Fields(n.Value), ""), nil
	}
	// !!str, !!timestamp (kept as written: JSON has no dates), and any custom tag.
	return n.Value, nil
}

// where names a place in the run file: its path and line.
func where(path string, n *yaml.Node) string {
	if path == "" {
		path = "the file"
	}
	return fmt.Sprintf("%s (line %d)", path, n.Line)
}

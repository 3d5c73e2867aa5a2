package httpapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"gopkg.in/yaml.v3"
)

// OpenAPI is the API's contract (openapi.yaml, OpenAPI 3.1) as written: the handler tests
// validate every request and response against it, and GET /v1/openapi.json serves it.
//
//go:embed openapi.yaml
var OpenAPI []byte

// OpenAPIJSON is the document as JSON, converted once, on first use: only the function that
// serves it pays for the conversion.
var OpenAPIJSON = sync.OnceValues(func() ([]byte, error) { return yamlToJSON(OpenAPI) })

// openapiDoc serves the document. It needs neither credentials nor the database.
func openapiDoc(c *call) (reply, error) {
	doc, err := OpenAPIJSON()
	if err != nil {
		return reply{}, err
	}
	return reply{http.StatusOK, json.RawMessage(doc)}, nil
}

// yamlToJSON converts a YAML document to JSON, keeping the order of every mapping's keys so
// the JSON reads like the YAML. Keys are written as text whatever YAML would type them ("200").
func yamlToJSON(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, &doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("line %d: want one YAML document", n.Line)
		}
		return writeJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, _ := json.Marshal(n.Content[i].Value)
			buf.Write(key)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, item); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalar(buf, n)
	default:
		return fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	return nil
}

func writeScalar(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		buf.WriteString("null")
		return nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %q has no JSON form: %w", n.Line, n.Value, err)
		}
		buf.Write(b)
		return nil
	case "!!str":
		b, _ := json.Marshal(n.Value)
		buf.Write(b)
		return nil
	}
	return fmt.Errorf("line %d: %s scalars have no JSON form", n.Line, n.ShortTag())
}

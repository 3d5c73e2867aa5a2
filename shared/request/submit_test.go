package request_test

import (
	"bytes"
	"strings"
	"testing"

	"mediator/shared/request"
)

// The shorthand and the explicit one-role form, in any key order, are the same request.
func TestSubmitCanonicalHash(t *testing.T) {
	t.Parallel()
	a, errs := request.Submit([]byte(`{"run_id":"r","needs":["b","a","a"],"steps":[{"id":"s","spec":{"y":1,"x":[1,2]}}]}`))
	if errs != nil {
		t.Fatal(errs)
	}
	b, errs := request.Submit([]byte(`{"steps":[{"spec":{"x":[1,2],"y":1},"role":"main","id":"s"}],"roles":{"main":{"needs":["a","b"]}},"run_id":"r","max_attempts":1}`))
	if errs != nil {
		t.Fatal(errs)
	}
	if !bytes.Equal(a.RequestHash, b.RequestHash) {
		t.Fatal("the same request hashed differently")
	}
	c, _ := request.Submit([]byte(`{"run_id":"r","needs":["a","b"],"steps":[{"id":"s","spec":{"y":2,"x":[1,2]}}]}`))
	if bytes.Equal(a.RequestHash, c.RequestHash) {
		t.Fatal("a different spec hashed the same")
	}
}

func TestSubmitProblems(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ body, path string }{
		"not JSON":          {`{"run_id":`, ""},
		"trailing data":     {`{"run_id":"r","needs":[],"steps":[{"id":"s"}]} {}`, ""},
		"duplicate key":     {`{"run_id":"r","run_id":"s","needs":[],"steps":[{"id":"s"}]}`, "run_id"},
		"not an object":     {`[1,2]`, ""},
		"unknown field":     {`{"run_id":"r","needs":[],"steps":[{"id":"s","colour":1}]}`, "steps[0].colour"},
		"wrong type":        {`{"run_id":7,"needs":[],"steps":[{"id":"s"}]}`, "run_id"},
		"no steps":          {`{"run_id":"r","needs":[],"steps":[]}`, "steps"},
		"both forms":        {`{"run_id":"r","needs":[],"roles":{"a":{"needs":[]}},"steps":[{"id":"s","role":"a"}]}`, "needs"},
		"neither form":      {`{"run_id":"r","steps":[{"id":"s"}]}`, "roles"},
		"role without step": {`{"run_id":"r","roles":{"a":{"needs":[]},"b":{"needs":[]}},"steps":[{"id":"s","role":"a"}]}`, "roles.b"},
		"self wait":         {`{"run_id":"r","needs":[],"steps":[{"id":"s","after":["s"]}]}`, "steps[0].after[0]"},
		"duplicate step":    {`{"run_id":"r","needs":[],"steps":[{"id":"s"},{"id":"s"}]}`, "steps[1].id"},
		"bad label":         {`{"run_id":"r","needs":["a b"],"steps":[{"id":"s"}]}`, "needs[0]"},
		"NUL in spec":       {`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"k":"a\u0000b"}}]}`, "steps[0].spec.k"},
		"huge number":       {`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":{"k":1e999}}]}`, "steps[0].spec.k"},
		"spec not object":   {`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":[1]}]}`, "steps[0].spec"},
		"too deep":          {`{"run_id":"r","needs":[],"steps":[{"id":"s","spec":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}]}`, ""},
		"timeout zero":      {`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"timeout_seconds":0}`, "timeout_seconds"},
		"fractional":        {`{"run_id":"r","needs":[],"steps":[{"id":"s"}],"max_attempts":1.5}`, "max_attempts"},
	}
	for name, tc := range cases {
		_, errs := request.Submit([]byte(tc.body))
		if errs == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if tc.path == "" {
			continue
		}
		found := false
		for _, e := range errs {
			found = found || e.Path == tc.path
		}
		if !found {
			t.Errorf("%s: no problem at %q in %+v", name, tc.path, errs)
		}
	}
}

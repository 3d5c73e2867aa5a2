package httpapi_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// This file reads CloudFormation the way CloudFormation does, as far as the template tests
// need: a template as plain values (short tags such as !Ref turned into their long forms, so a
// template read from YAML and one SAM's transform printed as JSON look alike), its parameters'
// values, and the intrinsic functions that Rules and Conditions are written in.

// cfnValue turns a YAML node into maps, lists and strings, with CloudFormation's short tags
// (!Ref X, !GetAtt A.B, !If [...], ...) in their long forms ({"Ref": "X"}, ...).
func cfnValue(n *yaml.Node) any {
	if n.Kind == yaml.DocumentNode {
		return cfnValue(n.Content[0])
	}
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = cfnValue(n.Content[i+1])
		}
		v = m
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			l = append(l, cfnValue(c))
		}
		v = l
	case yaml.AliasNode:
		return cfnValue(n.Alias)
	default:
		v = n.Value
	}
	tag := strings.TrimPrefix(n.Tag, "!")
	switch {
	case !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!"):
		return v
	case tag == "Ref" || tag == "Condition":
		return map[string]any{tag: v}
	case tag == "GetAtt" && n.Kind == yaml.ScalarNode:
		res, attr, _ := strings.Cut(n.Value, ".")
		return map[string]any{"Fn::GetAtt": []any{res, attr}}
	default:
		return map[string]any{"Fn::" + tag: v}
	}
}

// readCFN reads a YAML template file as plain values.
func readCFN(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not YAML: %v", path, err)
	}
	m, ok := cfnValue(&doc).(map[string]any)
	if !ok {
		t.Fatalf("%s is not a mapping", path)
	}
	return m
}

// cfnAt walks a path of mapping keys; nil when any is missing.
func cfnAt(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// parameterValues are a template's parameters with their defaults, then overrides, as
// CloudFormation passes them to Rules and Conditions: a CommaDelimitedList is a list of
// strings, anything else a string. It fails on an override no parameter has.
func parameterValues(tpl map[string]any, overrides map[string]string) (map[string]any, error) {
	params, _ := tpl["Parameters"].(map[string]any)
	values := map[string]any{}
	set := func(name, value string) {
		if typ, _ := cfnAt(params, name, "Type").(string); typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<") {
			values[name] = strings.Split(value, ",")
		} else {
			values[name] = value
		}
	}
	for name := range params {
		if d, ok := cfnAt(params, name, "Default").(string); ok {
			set(name, d)
		}
	}
	for name, value := range overrides {
		if _, ok := params[name]; !ok {
			return nil, fmt.Errorf("no parameter %s", name)
		}
		set(name, value)
	}
	for name := range params {
		if _, ok := values[name]; !ok {
			return nil, fmt.Errorf("parameter %s has no default and no value", name)
		}
	}
	return values, nil
}

// noValue is what Ref AWS::NoValue evaluates to: it removes itself from a list.
type noValue struct{}

// cfnEval evaluates the intrinsic functions of a template fragment against parameter values and
// the template's Conditions. Strict, it refuses what Rules may not contain (a Ref to anything
// but a parameter, a function it does not know); loose, it leaves such parts as they are, so a
// resource's properties can be resolved around the references to other resources.
type cfnEval struct {
	params     map[string]any
	conditions map[string]any
	mappings   map[string]any
	strict     bool
}

func (e cfnEval) eval(v any) (any, error) {
	switch v := v.(type) {
	case []any:
		out := []any{}
		for _, item := range v {
			r, err := e.eval(item)
			if err != nil {
				return nil, err
			}
			if _, skip := r.(noValue); !skip {
				out = append(out, r)
			}
		}
		return out, nil
	case map[string]any:
		if len(v) == 1 {
			for fn, arg := range v {
				if fn == "Ref" || fn == "Condition" || strings.HasPrefix(fn, "Fn::") {
					return e.call(fn, arg, v)
				}
			}
		}
		out := map[string]any{}
		for k, item := range v {
			r, err := e.eval(item)
			if err != nil {
				return nil, err
			}
			if _, skip := r.(noValue); !skip {
				out[k] = r
			}
		}
		return out, nil
	default:
		return v, nil
	}
}

func (e cfnEval) call(fn string, arg any, whole map[string]any) (any, error) {
	args, _ := arg.([]any)
	switch fn {
	case "Ref":
		name, _ := arg.(string)
		if name == "AWS::NoValue" {
			return noValue{}, nil
		}
		if p, ok := e.params[name]; ok {
			return p, nil
		}
		if e.strict {
			return nil, fmt.Errorf("Ref %v names no parameter", arg)
		}
		return whole, nil
	case "Condition":
		name, _ := arg.(string)
		return e.condition(name)
	case "Fn::If":
		if len(args) != 3 {
			return nil, fmt.Errorf("Fn::If takes 3 arguments: %v", arg)
		}
		name, _ := args[0].(string)
		ok, err := e.condition(name)
		if err != nil {
			return nil, err
		}
		if ok {
			return e.eval(args[1])
		}
		return e.eval(args[2])
	case "Fn::FindInMap":
		if len(args) != 3 || e.mappings == nil {
			break
		}
		var keys []string
		for _, a := range args {
			k, err := e.eval(a)
			if err != nil {
				return nil, err
			}
			keys = append(keys, fmt.Sprint(k))
		}
		v := cfnAt(e.mappings, keys...)
		if v == nil {
			return nil, fmt.Errorf("Fn::FindInMap %v: no such entry", keys)
		}
		return v, nil
	case "Fn::Equals", "Fn::Contains", "Fn::EachMemberEquals", "Fn::Join":
		if len(args) != 2 {
			return nil, fmt.Errorf("%s takes 2 arguments: %v", fn, arg)
		}
		a, err := e.eval(args[0])
		if err != nil {
			return nil, err
		}
		b, err := e.eval(args[1])
		if err != nil {
			return nil, err
		}
		switch fn {
		case "Fn::Equals":
			return fmt.Sprint(a) == fmt.Sprint(b), nil
		case "Fn::Join":
			list, err := stringList(b)
			if err != nil {
				return nil, fmt.Errorf("Fn::Join: %w", err)
			}
			return strings.Join(list, fmt.Sprint(a)), nil
		}
		list, err := stringList(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
		if fn == "Fn::Contains" {
			return slices.Contains(list, fmt.Sprint(b)), nil
		}
		return !slices.ContainsFunc(list, func(s string) bool { return s != fmt.Sprint(b) }), nil
	case "Fn::Not", "Fn::And", "Fn::Or":
		if (fn == "Fn::Not") != (len(args) == 1) || len(args) == 0 {
			return nil, fmt.Errorf("%s: wrong number of arguments: %v", fn, arg)
		}
		var results []bool
		for _, a := range args {
			r, err := e.eval(a)
			if err != nil {
				return nil, err
			}
			b, ok := r.(bool)
			if !ok {
				return nil, fmt.Errorf("%s of %v, which is not a condition", fn, a)
			}
			results = append(results, b)
		}
		switch fn {
		case "Fn::Not":
			return !results[0], nil
		case "Fn::And":
			return !slices.Contains(results, false), nil
		}
		return slices.Contains(results, true), nil
	}
	if e.strict {
		return nil, fmt.Errorf("%s is not evaluated here", fn)
	}
	return whole, nil
}

// condition evaluates one of the template's Conditions by name.
func (e cfnEval) condition(name string) (bool, error) {
	expr, ok := e.conditions[name]
	if !ok {
		return false, fmt.Errorf("no condition %q", name)
	}
	r, err := e.eval(expr)
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := r.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s is %v, not true or false", name, r)
	}
	return b, nil
}

// stringList is a list value as strings.
func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case []string:
		return v, nil
	case []any:
		out := make([]string, len(v))
		for i, item := range v {
			out[i] = fmt.Sprint(item)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is not a list", v)
}

// checkParameter is CloudFormation's own check of one parameter value, before any rule runs:
// AllowedValues, and AllowedPattern, which a CommaDelimitedList's every item must match whole.
func checkParameter(tpl map[string]any, name, value string) error {
	p, ok := cfnAt(tpl, "Parameters", name).(map[string]any)
	if !ok {
		return fmt.Errorf("no parameter %s", name)
	}
	if allowed, ok := p["AllowedValues"].([]any); ok {
		list, _ := stringList(allowed)
		if !slices.Contains(list, value) {
			return fmt.Errorf("%s=%q is not one of %v", name, value, list)
		}
	}
	pattern, ok := p["AllowedPattern"].(string)
	if !ok {
		return nil
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return fmt.Errorf("%s: AllowedPattern: %v", name, err)
	}
	items := []string{value}
	if typ, _ := p["Type"].(string); typ == "CommaDelimitedList" {
		items = strings.Split(value, ",")
	}
	for _, item := range items {
		if !re.MatchString(item) {
			return fmt.Errorf("%s=%q does not match %s", name, value, pattern)
		}
	}
	return nil
}

package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// jsonSchema is the subset of JSON Schema the aiperf schemas in testdata
// use: type, enum, const, required, properties, additionalProperties,
// items, minItems, maxItems, contains, minimum, exclusiveMinimum, maximum,
// exclusiveMaximum, minLength, maxLength, pattern, allOf, anyOf, oneOf and
// local $refs (a $ref replaces the rest of its schema).
type jsonSchema map[string]any

func loadSchema(path string) (jsonSchema, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s jsonSchema
	return s, json.Unmarshal(raw, &s)
}

// validate checks a JSON document (decoded with UseNumber) against s; root
// resolves $refs. Errors name the JSON path.
func (s jsonSchema) validate(root jsonSchema, v any, path string) error {
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, _ := root["$defs"].(map[string]any)[name].(map[string]any)
		if def == nil {
			return fmt.Errorf("%s: unknown $ref %s", path, ref)
		}
		return jsonSchema(def).validate(root, v, path)
	}
	if err := s.checkType(v, path); err != nil {
		return err
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return sameJSON(e, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, enum)
	}
	if c, ok := s["const"]; ok && !sameJSON(c, v) {
		return constError{path, fmt.Errorf("%s: %v is not %v", path, v, c)}
	}
	var err error
	switch x := v.(type) {
	case map[string]any:
		err = s.checkObject(root, x, path)
	case []any:
		err = s.checkArray(root, x, path)
	case json.Number:
		err = s.checkNumber(x, path)
	case string:
		err = s.checkString(x, path)
	}
	if err != nil {
		return err
	}
	return s.checkCombinations(root, v, path)
}

// constError is a value (at path) that is not its schema's const: in a
// oneOf of objects told apart by a const property (a discriminator), the
// alternatives that fail with it on that property are not the one the
// value meant.
type constError struct {
	path string
	error
}

// sameJSON compares a value from a schema (numbers as float64) with one
// from a document (numbers as json.Number).
func sameJSON(want, got any) bool {
	if n, ok := got.(json.Number); ok {
		f, err := n.Float64()
		w, isNum := want.(float64)
		return err == nil && isNum && f == w
	}
	return reflect.DeepEqual(want, got)
}

// checkCombinations applies allOf (every subschema), anyOf (at least one)
// and oneOf (exactly one).
func (s jsonSchema) checkCombinations(root jsonSchema, v any, path string) error {
	matches := func(key string) (int, []error) {
		n, errs := 0, []error(nil)
		for _, sub := range asSlice(s[key]) {
			m, _ := sub.(map[string]any)
			if err := jsonSchema(m).validate(root, v, path); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
		}
		return n, errs
	}
	// none reports the failures of the alternatives the value meant (those
	// whose discriminator it has), or of all of them.
	none := func(key string, errs []error) error {
		var meant []string
		for _, err := range errs {
			var ce constError
			if !errors.As(err, &ce) || !discriminator(path, ce.path) {
				meant = append(meant, err.Error())
			}
		}
		switch {
		case len(meant) == 1:
			return errors.New(meant[0])
		case len(meant) == 0:
			for _, err := range errs {
				meant = append(meant, err.Error())
			}
		}
		return fmt.Errorf("%s: matches none of %s (%s)", path, key, strings.Join(meant, "; "))
	}
	if all := asSlice(s["allOf"]); len(all) > 0 {
		if n, errs := matches("allOf"); n < len(all) {
			return errs[0]
		}
	}
	if anyOf := asSlice(s["anyOf"]); len(anyOf) > 0 {
		if n, errs := matches("anyOf"); n == 0 {
			return none("anyOf", errs)
		}
	}
	if oneOf := asSlice(s["oneOf"]); len(oneOf) > 0 {
		switch n, errs := matches("oneOf"); {
		case n == 0:
			return none("oneOf", errs)
		case n > 1:
			return fmt.Errorf("%s: matches %d of oneOf, not exactly one", path, n)
		}
	}
	return nil
}

// discriminator reports whether at is the value at path itself or one of
// its properties.
func discriminator(path, at string) bool {
	rest, ok := strings.CutPrefix(at, path)
	return ok && (rest == "" || strings.HasPrefix(rest, ".") && !strings.Contains(rest[1:], "."))
}

func (s jsonSchema) checkString(x, path string) error {
	n := float64(utf8.RuneCountInString(x))
	if m, ok := s["minLength"].(float64); ok && n < m {
		return fmt.Errorf("%s: %q is shorter than %v", path, x, m)
	}
	if m, ok := s["maxLength"].(float64); ok && n > m {
		return fmt.Errorf("%s: %q is longer than %v", path, x, m)
	}
	if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
		return fmt.Errorf("%s: %q does not match %s", path, x, p)
	}
	return nil
}

func (s jsonSchema) checkType(v any, path string) error {
	var types []string
	switch t := s["type"].(type) {
	case nil:
		return nil
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, x.(string))
		}
	}
	for _, t := range types {
		if jsonType(v, t) {
			return nil
		}
	}
	return fmt.Errorf("%s: %v is not %s", path, v, strings.Join(types, " or "))
}

func jsonType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := x.Float64()
		return t == "integer" && err == nil && !strings.ContainsAny(x.String(), ".eE") && f == math.Trunc(f)
	}
	return false
}

func (s jsonSchema) checkObject(root jsonSchema, x map[string]any, path string) error {
	if err := s.checkProperties(root, x, path); err != nil {
		return err
	}
	for _, r := range asSlice(s["required"]) {
		if _, ok := x[r.(string)]; !ok {
			return fmt.Errorf("%s: %s is required", path, r)
		}
	}
	return nil
}

func (s jsonSchema) checkProperties(root jsonSchema, x map[string]any, path string) error {
	props, _ := s["properties"].(map[string]any)
	// Discriminators (properties with a const) first, then the others in
	// order, so that errors do not depend on map order.
	hasConst := func(k string) bool {
		p, _ := props[k].(map[string]any)
		_, ok := p["const"]
		return ok
	}
	keys := slices.Sorted(maps.Keys(x))
	slices.SortStableFunc(keys, func(a, b string) int {
		switch ca, cb := hasConst(a), hasConst(b); {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	for _, k := range keys {
		v := x[k]
		if p, ok := props[k].(map[string]any); ok {
			if err := jsonSchema(p).validate(root, v, path+"."+k); err != nil {
				return err
			}
			continue
		}
		switch extra := s["additionalProperties"].(type) {
		case bool:
			if !extra {
				return fmt.Errorf("%s: %s is not allowed", path, k)
			}
		case map[string]any:
			if err := jsonSchema(extra).validate(root, v, path+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s jsonSchema) checkArray(root jsonSchema, x []any, path string) error {
	if n, ok := s["minItems"].(float64); ok && float64(len(x)) < n {
		return fmt.Errorf("%s: fewer than %v items", path, n)
	}
	if n, ok := s["maxItems"].(float64); ok && float64(len(x)) > n {
		return fmt.Errorf("%s: more than %v items", path, n)
	}
	if items, ok := s["items"].(map[string]any); ok {
		for i, v := range x {
			if err := jsonSchema(items).validate(root, v, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	if contains, ok := s["contains"].(map[string]any); ok && !slices.ContainsFunc(x, func(v any) bool {
		return jsonSchema(contains).validate(root, v, path) == nil
	}) {
		return fmt.Errorf("%s: no item matches contains", path)
	}
	return nil
}

func (s jsonSchema) checkNumber(x json.Number, path string) error {
	f, err := x.Float64()
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if m, ok := s["minimum"].(float64); ok && f < m {
		return fmt.Errorf("%s: %v is below %v", path, f, m)
	}
	if m, ok := s["exclusiveMinimum"].(float64); ok && f <= m {
		return fmt.Errorf("%s: %v is not above %v", path, f, m)
	}
	if m, ok := s["maximum"].(float64); ok && f > m {
		return fmt.Errorf("%s: %v is above %v", path, f, m)
	}
	if m, ok := s["exclusiveMaximum"].(float64); ok && f >= m {
		return fmt.Errorf("%s: %v is not below %v", path, f, m)
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// decodeNumbers decodes JSON keeping numbers' text (integer vs float).
func decodeNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	return v, dec.Decode(&v)
}

func TestJSONSchemaSubset(t *testing.T) {
	root := jsonSchema{"$defs": map[string]any{}}
	for _, c := range []struct {
		schema, ok, bad string
	}{
		{`{"const": "a"}`, `"a"`, `"b"`},
		{`{"const": 1}`, `1.0`, `2`},
		{`{"enum": [1, "x"]}`, `1`, `"1"`},
		{`{"type": "number", "maximum": 1}`, `1`, `1.5`},
		{`{"type": "number", "exclusiveMaximum": 1}`, `0.5`, `1`},
		{`{"type": "string", "minLength": 2, "maxLength": 3}`, `"ab"`, `"a"`},
		{`{"type": "string", "minLength": 2, "maxLength": 3}`, `"abc"`, `"abcd"`},
		{`{"type": "array", "contains": {"const": 2}}`, `[1, 2]`, `[1, 3]`},
		{`{"allOf": [{"type": "integer"}, {"minimum": 2}]}`, `3`, `1`},
		{`{"anyOf": [{"type": "string"}, {"minimum": 2}]}`, `"s"`, `1`},
		{`{"oneOf": [{"type": "integer"}, {"type": "string"}]}`, `1`, `true`},
		{`{"oneOf": [{"type": "number"}, {"type": "integer"}]}`, `1.5`, `1`}, // 1 matches both
		{`{"type": "object", "properties": {"a": {}}, "additionalProperties": false}`, `{"a": 1}`, `{"a": 1, "b": 2}`},
		{`{"type": "object", "additionalProperties": {"type": "string"}}`, `{"a": "x"}`, `{"a": 1}`},
		{`{"type": "object", "required": ["a"], "anyOf": [{"required": ["b"]}, {"required": ["c"]}]}`, `{"a": 1, "c": 2}`, `{"a": 1}`},
	} {
		s := mustSchema(t, c.schema)
		ok, err := decodeNumbers([]byte(c.ok))
		require.NoError(t, err)
		require.NoError(t, s.validate(root, ok, "$"), "%s accepts %s", c.schema, c.ok)
		bad, err := decodeNumbers([]byte(c.bad))
		require.NoError(t, err)
		require.Error(t, s.validate(root, bad, "$"), "%s refuses %s", c.schema, c.bad)
	}

	// A oneOf of objects told apart by a const property reports why the
	// alternative the value meant failed, not that the others' const did.
	union := mustSchema(t, `{"oneOf": [
		{"type": "object", "required": ["type", "rate"], "properties": {"type": {"const": "rate"}, "rate": {"type": "number"}}, "additionalProperties": false},
		{"type": "object", "required": ["type"], "properties": {"type": {"const": "burst"}, "n": {"type": "integer"}}, "additionalProperties": false}]}`)
	for doc, want := range map[string]string{
		`{"type": "rate"}`:                 "$: rate is required",
		`{"type": "burst", "n": 1.5}`:      "$.n: 1.5 is not integer",
		`{"type": "burst", "rate": 1}`:     "$: rate is not allowed",
		`{"type": "other"}`:                "$: matches none of oneOf",
		`{"type": "rate", "rate": "fast"}`: "$.rate: fast is not number",
	} {
		v, err := decodeNumbers([]byte(doc))
		require.NoError(t, err)
		err = union.validate(root, v, "$")
		require.Error(t, err, doc)
		require.True(t, strings.HasPrefix(err.Error(), want), "%s: %v", doc, err)
	}
}

func mustSchema(t *testing.T, text string) jsonSchema {
	t.Helper()
	var s jsonSchema
	require.NoError(t, json.Unmarshal([]byte(text), &s))
	return s
}

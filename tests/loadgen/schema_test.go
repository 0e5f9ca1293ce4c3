package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
)

// jsonSchema is the subset of JSON Schema the aiperf schemas in testdata
// use: type, enum, required, properties, additionalProperties, items,
// minItems, maxItems, minimum, exclusiveMinimum, pattern and local $refs.
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
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, v, enum)
	}
	switch x := v.(type) {
	case map[string]any:
		return s.checkObject(root, x, path)
	case []any:
		return s.checkArray(root, x, path)
	case json.Number:
		return s.checkNumber(x, path)
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%s: %q does not match %s", path, x, p)
		}
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
	for _, r := range asSlice(s["required"]) {
		if _, ok := x[r.(string)]; !ok {
			return fmt.Errorf("%s: %s is required", path, r)
		}
	}
	props, _ := s["properties"].(map[string]any)
	for k, v := range x {
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

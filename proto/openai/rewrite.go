package openai

import (
	"encoding/json"
	"fmt"
)

// RewriteBody returns body with the keys in set overridden (added when
// absent) and the keys in remove deleted; every other top-level field is
// kept byte for byte, so fields duet does not know survive a relay and
// 64-bit integers are never turned into floats. A nil value in set is
// written as JSON null. Output keys are sorted, so the result is
// deterministic.
func RewriteBody(body []byte, set map[string]any, remove ...string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("rewrite body: %w", err)
	}
	if fields == nil {
		return nil, fmt.Errorf("rewrite body: not a JSON object")
	}
	for _, k := range remove {
		delete(fields, k)
	}
	for k, v := range set {
		raw, err := rawValue(v)
		if err != nil {
			return nil, fmt.Errorf("rewrite body: key %s: %w", k, err)
		}
		fields[k] = raw
	}
	return json.Marshal(fields)
}

func rawValue(v any) (json.RawMessage, error) {
	switch t := v.(type) {
	case json.RawMessage:
		if t == nil {
			return json.RawMessage("null"), nil
		}
		return t, nil
	case nil:
		return json.RawMessage("null"), nil
	}
	return json.Marshal(v)
}

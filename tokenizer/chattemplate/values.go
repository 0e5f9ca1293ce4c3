package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ardanlabs/jinja"
)

// decodeJSON decodes one JSON value into a template value the way Python's
// json.loads does: objects keep their key order (jinja.FromGoValue would
// sort them, and tojson of a tool would then differ from the engine's),
// integers stay integers and numbers with a fraction or exponent are
// floats.
func decodeJSON(b []byte) (jinja.Value, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := d.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (jinja.Value, error) {
	t, err := d.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := t.(type) {
	case json.Delim:
		if t == '[' {
			var items []jinja.Value
			for d.More() {
				v, err := decodeValue(d)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := d.Token()
			return jinja.NewList(items), err
		}
		obj := jinja.NewDict()
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return jinja.Undefined(), err
			}
			v, err := decodeValue(d)
			if err != nil {
				return jinja.Undefined(), err
			}
			obj.AsDict().Set(k.(string), v)
		}
		_, err := d.Token()
		return obj, err
	case nil:
		return jinja.None(), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	default: // bool, string
		return jinja.FromGoValue(t), nil
	}
}

// dict builds a template dict from key/value pairs, in order.
func dict(pairs ...any) jinja.Value {
	d := jinja.NewDict()
	for i := 0; i < len(pairs); i += 2 {
		v, ok := pairs[i+1].(jinja.Value)
		if !ok {
			v = jinja.FromGoValue(pairs[i+1])
		}
		d.AsDict().Set(pairs[i].(string), v)
	}
	return d
}

// messageValues prepares the messages the way vLLM's chat_utils.py does
// before it calls apply_chat_template (vllm/entrypoints/chat_utils.py,
// _parse_chat_message_content and _postprocess_messages, vLLM main at
// 001eadcf):
//
//   - content becomes a string (text parts joined by "\n", null is "") for
//     a template of content format "string", or a list of
//     {"type": "text", "text": ...} for format "openai" (a string is one
//     part, null an empty list); a tool message's list is joined to a
//     string in both formats;
//   - parts of type text or refusal without text are skipped; other parts
//     (images, audio) are an error here, duet does not render media;
//   - an assistant's tool_calls are kept (an empty list is dropped), their
//     arguments parsed from a JSON string to an object ({} when not valid
//     JSON or not a string, object or list);
//   - reasoning is passed as both reasoning and reasoning_content;
//   - name and tool_call_id are passed when present.
func messageValues(msgs []Message, format ContentFormat) (jinja.Value, error) {
	items := make([]jinja.Value, len(msgs))
	for i := range msgs {
		v, err := messageValue(&msgs[i], format)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("messages[%d]: %w", i, err)
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

func messageValue(m *Message, format ContentFormat) (jinja.Value, error) {
	texts, err := contentTexts(m.Content)
	if err != nil {
		return jinja.Undefined(), err
	}
	d := jinja.NewDict()
	out := d.AsDict()
	out.Set("role", jinja.NewString(m.Role))
	if format == FormatOpenAI && m.Role != "tool" {
		parts := make([]jinja.Value, len(texts))
		for i, t := range texts {
			parts[i] = dict("type", "text", "text", t)
		}
		out.Set("content", jinja.NewList(parts))
	} else {
		out.Set("content", jinja.NewString(joinLines(texts)))
	}
	switch m.Role {
	case "assistant":
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for i := range m.ToolCalls {
				calls[i] = toolCallValue(&m.ToolCalls[i])
			}
			out.Set("tool_calls", jinja.NewList(calls))
		}
		if m.Reasoning != nil {
			out.Set("reasoning", jinja.NewString(*m.Reasoning))
			out.Set("reasoning_content", jinja.NewString(*m.Reasoning))
		}
	case "tool":
		if m.ToolCallID != nil {
			out.Set("tool_call_id", jinja.NewString(*m.ToolCallID))
		}
	}
	if m.Name != "" {
		out.Set("name", jinja.NewString(m.Name))
	}
	return d, nil
}

// contentTexts returns the texts of a message's content, in order.
func contentTexts(c Content) ([]string, error) {
	switch {
	case c.isText:
		return []string{c.text}, nil
	case c.isList:
		texts := make([]string, 0, len(c.parts))
		for i, p := range c.parts {
			switch p.Type {
			case "text", "refusal", "input_text", "output_text":
				if p.Text != nil {
					texts = append(texts, *p.Text)
				}
			default:
				return nil, fmt.Errorf("content[%d]: part type %q: %w", i, p.Type, ErrUnsupportedPart)
			}
		}
		return texts, nil
	}
	return nil, nil
}

func joinLines(texts []string) string {
	switch len(texts) {
	case 0:
		return ""
	case 1:
		return texts[0]
	}
	n := len(texts) - 1
	for _, t := range texts {
		n += len(t)
	}
	b := make([]byte, 0, n)
	for i, t := range texts {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, t...)
	}
	return string(b)
}

func toolCallValue(tc *ToolCall) jinja.Value {
	return dict(
		"id", tc.ID,
		"type", tc.Type,
		"function", dict("name", tc.Name, "arguments", argumentsValue(tc.Arguments)),
	)
}

// argumentsValue parses a tool call's arguments as vLLM's
// _postprocess_messages does: a string holding JSON becomes its value, an
// object or list stays, anything else (null, a number, a string that is
// not JSON) becomes {}.
func argumentsValue(raw json.RawMessage) jinja.Value {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return jinja.NewDict()
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return jinja.NewDict()
		}
		v, err := decodeJSON([]byte(s))
		if err != nil {
			return jinja.NewDict()
		}
		return v
	case '{', '[':
		if v, err := decodeJSON(raw); err == nil {
			return v
		}
	}
	return jinja.NewDict()
}

// toolValue normalises one tool the way vLLM's ChatCompletionToolsParam
// model_dump() does (vllm/entrypoints/openai protocol.py): "type" (default
// "function"), then "function" with name, description and parameters
// (null when absent) before any other keys, then the tool's other keys.
func toolValue(raw json.RawMessage) (jinja.Value, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return jinja.Undefined(), err
	}
	if !v.IsDict() {
		return jinja.Undefined(), errors.New("a tool must be a JSON object")
	}
	in := v.AsDict()
	fn, ok := in.Get("function")
	if !ok || !fn.IsDict() {
		return jinja.Undefined(), errors.New(`a tool needs a "function" object`)
	}
	if name, ok := fn.AsDict().Get("name"); !ok || !name.IsString() {
		return jinja.Undefined(), errors.New(`a tool's function needs a "name" string`)
	}
	out := jinja.NewDict()
	typ, ok := in.Get("type")
	if !ok {
		typ = jinja.NewString("function")
	}
	out.AsDict().Set("type", typ)
	out.AsDict().Set("function", orderedFirst(fn.AsDict(), "name", "description", "parameters"))
	for _, k := range in.Keys {
		if k != "type" && k != "function" {
			out.AsDict().Set(k, in.Data[k])
		}
	}
	return out, nil
}

// orderedFirst copies d with the given keys first (None when absent).
func orderedFirst(d *jinja.Dict, first ...string) jinja.Value {
	out := jinja.NewDict()
	for _, k := range first {
		v, ok := d.Get(k)
		if !ok {
			v = jinja.None()
		}
		out.AsDict().Set(k, v)
	}
	for _, k := range d.Keys {
		if !out.AsDict().Has(k) {
			out.AsDict().Set(k, d.Data[k])
		}
	}
	return out
}

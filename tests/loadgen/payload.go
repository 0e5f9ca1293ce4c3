package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/duet-serve/duet/tokenizer"
)

// conversation is the client side of one session in flight: the messages
// sent so far and the model's actual replies. It is used by one goroutine.
type conversation struct {
	sess    *Session
	history []tokenizer.ChatMessage
}

func newConversation(s *Session) *conversation {
	c := &conversation{sess: s}
	if s.System != "" {
		c.history = append(c.history, tokenizer.ChatMessage{Role: "system", Content: s.System})
	}
	return c
}

// messages returns what turn k sends: the system message, every earlier
// user turn with the reply it got, and turn k (a stateless session sends
// the system message and turn k only).
func (c *conversation) messages(k int) []tokenizer.ChatMessage {
	msgs := make([]tokenizer.ChatMessage, len(c.history), len(c.history)+1)
	copy(msgs, c.history)
	return append(msgs, tokenizer.ChatMessage{Role: "user", Content: c.sess.Turns[k].Text})
}

// answered records turn k's reply so the next turn resends both.
func (c *conversation) answered(k int, reply string) {
	if c.sess.Stateless {
		return
	}
	c.history = append(c.history,
		tokenizer.ChatMessage{Role: "user", Content: c.sess.Turns[k].Text},
		tokenizer.ChatMessage{Role: "assistant", Content: reply})
}

// plainPrompt renders messages as one completions prompt: the contents in
// order, separated by blank lines.
func plainPrompt(msgs []tokenizer.ChatMessage) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n\n")
}

// promptTokens returns the tokens duet's frontend sees for the prompt: the
// ChatML rendering for chat (tokenized per message, cached), the plain
// prompt for completions.
func promptTokens(tok *tokenizer.Tokenizer, endpoint string, msgs []tokenizer.ChatMessage) []int {
	tokens, _ := encodePrompt(tok, endpoint, msgs) // Run checked that chats render
	return tokens
}

// encodePrompt is promptTokens with the chat template's error: the
// model has none, or refuses the conversation's shape.
func encodePrompt(tok *tokenizer.Tokenizer, endpoint string, msgs []tokenizer.ChatMessage) ([]int, error) {
	if endpoint == EndpointCompletions {
		return tok.EncodePrompt(plainPrompt(msgs)), nil
	}
	return tok.EncodeChat(tokenizer.Conversation(msgs))
}

// CheckTemplate renders a conversation of the workload's shape (a system
// message, two user turns and a reply) so that a tokenizer whose template
// cannot render the workload's chats fails the run before it starts,
// rather than counting every prompt as empty.
func CheckTemplate(tok *tokenizer.Tokenizer, endpoint string) error {
	msgs := []tokenizer.ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "u"},
		{Role: "assistant", Content: "a"}, {Role: "user", Content: "u"}}
	if _, err := encodePrompt(tok, endpoint, msgs); err != nil {
		return fmt.Errorf("loadgen: the tokenizer cannot count this workload's prompts (%w); use --endpoint-type completions or another --tokenizer", err)
	}
	return nil
}

// jsonField is one member of a JSON object written in order.
type jsonField struct {
	key string
	val json.RawMessage
}

// body builds a request body for the endpoint: model, the prompt, stream
// settings and the output limit, then the extra inputs, which replace
// fields of the same name.
func body(cfg Config, msgs []tokenizer.ChatMessage, maxTokens int) []byte {
	fields := []jsonField{{"model", mustJSON(cfg.Model)}}
	limitKey := "max_completion_tokens"
	if cfg.EndpointType == EndpointCompletions {
		fields = append(fields, jsonField{"prompt", mustJSON(plainPrompt(msgs))})
		limitKey = "max_tokens"
	} else {
		type message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		ms := make([]message, len(msgs))
		for i, m := range msgs {
			ms[i] = message{m.Role, m.Content}
		}
		fields = append(fields, jsonField{"messages", mustJSON(ms)})
		if cfg.LegacyMaxTokens {
			limitKey = "max_tokens"
		}
	}
	fields = append(fields, jsonField{"stream", mustJSON(cfg.Streaming)})
	if cfg.Streaming {
		fields = append(fields, jsonField{"stream_options", json.RawMessage(`{"include_usage":true}`)})
	}
	if maxTokens > 0 {
		fields = append(fields, jsonField{limitKey, mustJSON(maxTokens)})
	}
	for _, e := range cfg.ExtraInputs {
		fields = setField(fields, e.Key, e.Value)
	}
	return writeObject(fields)
}

func setField(fields []jsonField, key string, val json.RawMessage) []jsonField {
	for i := range fields {
		if fields[i].key == key {
			fields[i].val = val
			return fields
		}
	}
	return append(fields, jsonField{key, val})
}

func writeObject(fields []jsonField) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(f.key))
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// mustJSON marshals values that cannot fail (strings, numbers, bools and
// structs of them).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ParseExtraInput parses one --extra-inputs argument: "key:value", where a
// value that is valid JSON keeps its type (true, 3, 0.5, {"a":1}) and any
// other value is a string.
func ParseExtraInput(arg string) (ExtraInput, error) {
	k, v, ok := strings.Cut(arg, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return ExtraInput{}, errExtraInput(arg)
	}
	raw := json.RawMessage(strings.TrimSpace(v))
	if !json.Valid(raw) {
		raw = mustJSON(v)
	}
	return ExtraInput{Key: strings.TrimSpace(k), Value: raw}, nil
}

// ParseExtraInputs parses one --extra-inputs argument that may also be a
// JSON object of several fields.
func ParseExtraInputs(arg string) ([]ExtraInput, error) {
	if t := strings.TrimSpace(arg); strings.HasPrefix(t, "{") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(t), &m); err != nil {
			return nil, errExtraInput(arg)
		}
		out := make([]ExtraInput, 0, len(m))
		for _, k := range sortedKeys(m) {
			out = append(out, ExtraInput{Key: k, Value: m[k]})
		}
		return out, nil
	}
	e, err := ParseExtraInput(arg)
	if err != nil {
		return nil, err
	}
	return []ExtraInput{e}, nil
}

// ParseHeaders parses one -H/--header argument: "Name:Value" or a JSON
// object of names to values.
func ParseHeaders(arg string) ([]Header, error) {
	if t := strings.TrimSpace(arg); strings.HasPrefix(t, "{") {
		var m map[string]string
		if err := json.Unmarshal([]byte(t), &m); err != nil {
			return nil, errHeader(arg)
		}
		out := make([]Header, 0, len(m))
		for _, k := range sortedKeys(m) {
			out = append(out, Header{Name: k, Value: m[k]})
		}
		return out, nil
	}
	k, v, ok := strings.Cut(arg, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return nil, errHeader(arg)
	}
	return []Header{{Name: strings.TrimSpace(k), Value: strings.TrimSpace(v)}}, nil
}

func errExtraInput(arg string) error {
	return fmt.Errorf("--extra-inputs: %q is not key:value or a JSON object", arg)
}

func errHeader(arg string) error {
	return fmt.Errorf("--header: %q is not Name:Value or a JSON object", arg)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/openai"
)

func TestParseContext(t *testing.T) {
	const chatPrefix = `{"id":"c1","model":"m","created":7,"choices":[{"index":0,"message":`
	for _, tc := range []struct {
		name     string
		ep       protocol.Endpoint
		body     string
		wantText string
		wantErr  string
	}{
		{name: "chat string content", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, wantText: "hi"},
		{name: "chat content parts joined", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]},"finish_reason":"stop"}]}`, wantText: "ab"},
		{name: "chat null content", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":null,"tool_calls":[]},"finish_reason":"tool_calls"}]}`, wantText: ""},
		{name: "chat ignores text", ep: protocol.EndpointChat,
			body: `{"choices":[{"text":"t","finish_reason":"stop"}]}`, wantText: ""},
		{name: "completion text", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","message":{"role":"assistant","content":"m"},"finish_reason":"stop"}]}`, wantText: "t"},
		{name: "usage not an object", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"stop"}],"usage":[1]}`, wantErr: "x: bad context response: usage: not a JSON object"},
		{name: "usage field of wrong type", ep: protocol.EndpointCompletions,
			body:    `{"choices":[{"text":"t","finish_reason":"stop"}],"usage":{"prompt_tokens":"3"}}`,
			wantErr: `x: bad context response: usage: prompt_tokens: want an integer, got "3"`},
		{name: "id of wrong type", ep: protocol.EndpointCompletions,
			body: `{"id":5,"choices":[{"text":"t","finish_reason":"stop"}]}`, wantErr: "x: bad context response: id: want a string, got 5"},
		{name: "choices not a list", ep: protocol.EndpointCompletions,
			body: `{"choices":{"text":"t"}}`, wantErr: "x: bad context response: choices: not an array"},
		{name: "no choices key", ep: protocol.EndpointCompletions, body: `{"id":"c"}`, wantErr: "x: bad context response: 0 choices, want 1"},
		{name: "empty finish_reason is left to the adapter", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":""}]}`, wantText: "t"},
		{name: "null finish_reason is left to the adapter", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":null}]}`, wantText: "t"},
		{name: "spaces after colons and commas", ep: protocol.EndpointChat,
			body: `{"choices": [{"index": 0, "message": {"role": "assistant", "content": "m"}, "finish_reason": "length"}]}`, wantText: "m"},
		{name: "error finish_reason", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"error"}]}`, wantErr: `x: bad context response: finish_reason "error"`},
		{name: "timeout finish_reason", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"timeout"}]}`, wantErr: `x: bad context response: finish_reason "timeout"`},
		{name: "array body", ep: protocol.EndpointCompletions, body: `[]`, wantErr: "x: bad context response: not a JSON object"},
		{name: "empty body", ep: protocol.EndpointCompletions, body: ``, wantErr: "x: bad context response: not JSON: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseContext("x", tc.ep, []byte(tc.body))
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				require.True(t, errors.Is(err, protocol.ErrBadContextResponse))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantText, p.Context.Text)
		})
	}
}

// TestParseContextAgreesWithReference: on every engine response the
// adapters' tests hold, and on the cases above, ParseContext reads what the
// encoding/json reference reads, or both reject the body.
func TestParseContextAgreesWithReference(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "*", "testdata", "responses", "*"))
	require.NoError(t, err)
	require.Greater(t, len(paths), 30)
	bodies := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		bodies[p] = b
	}
	for _, bb := range []string{
		`{"choices":[null]}`, `{"choices":null}`, `{"choices":[{"finish_reason":null,"text":null,"message":null}],"usage":null}`,
		`{"created":1.5,"choices":[{}]}`, `{"created":-7,"choices":[{}]}`, `{"created":"7","choices":[{}]}`,
		`{"id":"\u00e9\ud83d\ude00","model":"m\n","choices":[{"text":"a\u0000b","finish_reason":"len\u0067th"}]}`,
		`{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}`, `{"choices":[5]}`, `{"choices":[{"disaggregated_params":{"ctx_request_id":18446744073709551615}}]}`,
		`{"usage":{"prompt_tokens":1e2},"choices":[{}]}`, `{"usage":{"prompt_tokens_details":{"cached_tokens":9}},"choices":[{}]}`,
		`{"usage":{"prompt_tokens_details":[]},"choices":[{}]}`, `{"usage":{"prompt_tokens":99999999999999999999},"choices":[{}]}`,
		"{\"choices\":[{\"text\":\"\xff\"}]}", `{"prompt_token_ids":{},"choices":[{}]}`, `{"kv_transfer_params":{"a":[1]},"choices":[{}]}`,
	} {
		bodies[bb] = []byte(bb)
	}
	// A completion's message is not read (the reference decoded it all).
	chatOnly := map[string]bool{`{"choices":[{"message":{"content":5}}]}`: true, `{"choices":[{"message":[1]}]}`: true}
	for b := range chatOnly {
		bodies[b] = []byte(b)
	}
	for name, body := range bodies {
		for _, ep := range []protocol.Endpoint{protocol.EndpointChat, protocol.EndpointCompletions} {
			if chatOnly[name] && ep != protocol.EndpointChat {
				continue
			}
			want, wantErr := parseContextReference("x", ep, body)
			got, err := ParseContext("x", ep, body)
			if wantErr != nil {
				require.Error(t, err, "%s (%v): the reference rejects it: %v", name, ep, wantErr)
				require.ErrorIs(t, err, protocol.ErrBadContextResponse)
				continue
			}
			require.NoError(t, err, "%s (%v)", name, ep)
			require.Equal(t, want, got, "%s (%v)", name, ep)
		}
	}
}

// parseContextReference is ParseContext as it was before issue 13 (a map
// of raw values, then encoding/json into structs), kept to check the fast
// one against. It owns copies of DecodeObject and its scanning helpers so
// that a change to Object does not move the reference.
func parseContextReference(adapter string, ep protocol.Endpoint, body []byte) (Parsed, error) {
	bad := func(err error, format string, args ...any) error {
		return &protocol.ContextResponseError{Adapter: adapter, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if err := openai.CheckDepth(body, openai.MaxWorkerDepth); err != nil {
		return Parsed{}, bad(err, "not a response")
	}
	top, err := refDecodeObject(body)
	switch {
	case errors.Is(err, errRefNotObject):
		return Parsed{}, bad(nil, "not a JSON object")
	case err != nil:
		return Parsed{}, bad(err, "not JSON")
	}
	var r struct {
		ID      string
		Model   string
		Created int64
		Choices []refChoice
	}
	for _, f := range []struct {
		key string
		dst any
	}{{"id", &r.ID}, {"model", &r.Model}, {"created", &r.Created}, {"choices", &r.Choices}} {
		if raw := top[f.key]; !refIsNull(raw) {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return Parsed{}, bad(err, "%s", f.key)
			}
		}
	}
	if len(r.Choices) != 1 {
		return Parsed{}, bad(nil, "%d choices, want 1", len(r.Choices))
	}
	c := r.Choices[0]
	var reason string
	if c.FinishReason != nil {
		reason = *c.FinishReason
	}
	if openai.IsFailureFinishReason(reason) {
		return Parsed{}, bad(nil, "finish_reason %q", reason)
	}
	rawUsage := refNullToNil(top["usage"])
	usage := &openai.Usage{}
	if !refIsNull(rawUsage) {
		if refFirst(rawUsage) != '{' {
			return Parsed{}, bad(errRefNotObject, "usage")
		}
		if err := json.Unmarshal(rawUsage, usage); err != nil {
			return Parsed{}, bad(err, "usage")
		}
	}
	ids := refNullToNil(top["prompt_token_ids"])
	if ids != nil && refFirst(ids) != '[' {
		return Parsed{}, bad(nil, "prompt_token_ids is not an array")
	}
	p := Parsed{
		Context: protocol.Context{
			PromptTokenIDs:   ids,
			Usage:            rawUsage,
			PromptTokens:     usage.PromptTokens,
			CachedTokens:     usage.CachedTokens(),
			CachedReported:   usage.PromptTokensDetails != nil,
			CompletionTokens: usage.CompletionTokens,
			FinishReason:     reason,
			Text:             c.Text,
			ResponseID:       r.ID,
			Model:            r.Model,
			Created:          r.Created,
		},
		ChoiceParams:     refNullToNil(c.DisaggregatedParams),
		KVTransferParams: refNullToNil(top["kv_transfer_params"]),
	}
	if ep == protocol.EndpointChat {
		p.Context.Text = ""
		if c.Message != nil {
			p.Context.Text = c.Message.Content.String()
		}
	}
	return p, nil
}

// refChoice is the reference's choice.
type refChoice struct {
	Text                string          `json:"text"`
	Message             *openai.Message `json:"message"`
	FinishReason        *string         `json:"finish_reason"`
	DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
}

var errRefNotObject = errors.New("not a JSON object")

// refDecodeObject is DecodeObject as it was before issue 13.
func refDecodeObject(b []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(b) {
		var v any
		return nil, json.Unmarshal(b, &v)
	}
	b = bytes.Clone(b)
	i := refSkipSpace(b, 0)
	if b[i] != '{' {
		return nil, errRefNotObject
	}
	o := map[string]json.RawMessage{}
	i = refSkipSpace(b, i+1)
	for b[i] != '}' {
		end := refEndOfString(b, i)
		key, err := refUnquote(b[i:end])
		if err != nil {
			return nil, err
		}
		i = refSkipSpace(b, end)
		i = refSkipSpace(b, i+1)
		end = refEndOfValue(b, i)
		o[key] = b[i:end:end]
		i = refSkipSpace(b, end)
		if b[i] == ',' {
			i = refSkipSpace(b, i+1)
		}
	}
	return o, nil
}

func refUnquote(lit []byte) (string, error) {
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

func refIsNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func refNullToNil(raw json.RawMessage) json.RawMessage {
	if refIsNull(raw) {
		return nil
	}
	return raw
}

func refFirst(b []byte) byte {
	if i := refSkipSpace(b, 0); i < len(b) {
		return b[i]
	}
	return 0
}

func refSkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func refEndOfString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

var refStructural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

func refEndOfValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return refEndOfString(b, i)
	case '{', '[':
		depth := 0
		for {
			for !refStructural[b[i]] {
				i++
			}
			switch b[i] {
			case '"':
				i = refEndOfString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// benchBodies are ctx responses as the engines write them: the adapters'
// testdata, and a TensorRT-LLM completion of a 2,048-token prompt (its
// prompt_token_ids dominate the body).
func benchBodies(b *testing.B) []struct {
	name string
	ep   protocol.Endpoint
	body []byte
} {
	read := func(path string) []byte {
		body, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
		require.NoError(b, err)
		return body
	}
	ids := make([]string, 2048)
	for i := range ids {
		ids[i] = strconv.Itoa(100 + i*61%128000)
	}
	long := bytes.Replace(read("trtllm/testdata/responses/completion_not_finished.json"),
		[]byte("[128000, 791, 6864, 315, 9822, 374]"), []byte("["+strings.Join(ids, ", ")+"]"), 1)
	require.Greater(b, len(long), 10000)
	return []struct {
		name string
		ep   protocol.Endpoint
		body []byte
	}{
		{"vllm_chat", protocol.EndpointChat, read("vllm/testdata/responses/chat_prefill.json")},
		{"vllm_completion", protocol.EndpointCompletions, read("vllm/testdata/responses/completion_prefill.json")},
		{"trtllm_chat", protocol.EndpointChat, read("trtllm/testdata/responses/chat_not_finished.json")},
		{"trtllm_completion_2k_prompt", protocol.EndpointCompletions, long},
	}
}

// BenchmarkParseContext reads engines' ctx responses (issue 13: relay
// CPU).
func BenchmarkParseContext(b *testing.B) {
	for _, bb := range benchBodies(b) {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				if _, err := ParseContext("x", bb.ep, bb.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package openai

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPromptShapes(t *testing.T) {
	cases := []struct {
		name    string
		json    string
		kind    PromptKind
		batched bool
		text    string
		tokens  []int
		wantErr bool
	}{
		{"string", `"hi"`, PromptText, false, "hi", nil, false},
		{"one string in list", `["hi"]`, PromptTexts, false, "hi", nil, false},
		{"batched strings", `["a","b"]`, PromptTexts, true, "", nil, false},
		{"tokens", `[1,2,3]`, PromptTokens, false, "", []int{1, 2, 3}, false},
		{"one token list", `[[4,5]]`, PromptTokenLists, false, "", []int{4, 5}, false},
		{"batched token lists", `[[1],[2]]`, PromptTokenLists, true, "", nil, false},
		{"null", `null`, PromptMissing, false, "", nil, false},
		{"number", `42`, 0, false, "", nil, true},
		{"object", `{"a":1}`, 0, false, "", nil, true},
		{"mixed list", `["a",1]`, 0, false, "", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Prompt
			err := json.Unmarshal([]byte(tc.json), &p)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.kind, p.Kind)
			require.Equal(t, tc.batched, p.Batched())
			if !tc.batched && tc.kind != PromptMissing {
				text, tokens, isTokens := p.Single()
				require.Equal(t, tc.text, text)
				require.Equal(t, tc.tokens != nil, isTokens)
				require.Equal(t, tc.tokens, tokens)
			}
			out, err := json.Marshal(p)
			require.NoError(t, err)
			require.JSONEq(t, tc.json, string(out), "round trip keeps the shape")
		})
	}
}

func TestContentShapes(t *testing.T) {
	var m Message
	require.NoError(t, json.Unmarshal([]byte(`{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}`), &m))
	require.Equal(t, "ab", m.Content.String())
	out, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(out), `"image_url":{"url":"x"}`, "non-text parts survive")

	require.NoError(t, json.Unmarshal([]byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}`), &m))
	require.True(t, m.Content.Null)
	require.JSONEq(t, `[{"id":"1"}]`, string(m.ToolCalls))

	require.Error(t, json.Unmarshal([]byte(`{"role":"user","content":5}`), &m))
	require.Error(t, json.Unmarshal([]byte(`{"role":"user","content":[5]}`), &m))
}

func TestChatRequestLimitAndStop(t *testing.T) {
	var r ChatRequest
	require.NoError(t, json.Unmarshal([]byte(`{"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":7,"stop":"x"}`), &r))
	require.Equal(t, 7, r.Limit(), "max_completion_tokens wins")
	require.Equal(t, Stop{"x"}, r.Stop)
	require.NoError(t, json.Unmarshal([]byte(`{"model":"m","messages":[],"max_tokens":5,"stop":["a","b"]}`), &r))
	require.Equal(t, 5, (&ChatRequest{MaxTokens: Ptr(5)}).Limit())
	require.Equal(t, Stop{"a", "b"}, r.Stop)
	require.Error(t, json.Unmarshal([]byte(`{"stop":3}`), &r))
	var wrongType ChatRequest
	require.Error(t, json.Unmarshal([]byte(`{"model":"m","max_tokens":"ten"}`), &wrongType))
}

func TestRewriteBodyKeepsUnknownFieldsAndBigInts(t *testing.T) {
	body := []byte(`{"model":"m","nvext":{"x":[1,2]},"id":18446744073709551615,"stream":true,"drop":1}`)
	out, err := RewriteBody(body, map[string]any{"stream": false, "stream_options": nil, "raw": json.RawMessage(`{"k":9007199254740993}`)}, "drop")
	require.NoError(t, err)
	require.JSONEq(t, `{"model":"m","nvext":{"x":[1,2]},"id":18446744073709551615,"stream":false,"stream_options":null,"raw":{"k":9007199254740993}}`, string(out))
	require.Contains(t, string(out), "18446744073709551615", "64-bit integer kept byte for byte")

	_, err = RewriteBody([]byte(`[1]`), nil)
	require.Error(t, err)
	_, err = RewriteBody([]byte(`null`), nil)
	require.Error(t, err)
}

func TestErrorBodyShape(t *testing.T) {
	require.JSONEq(t, `{"error":{"message":"m","type":"invalid_request_error","param":"model","code":null}}`,
		string(NewError("m", ErrTypeInvalidRequest, "model", "").JSON()))
	require.Equal(t, ErrTypeRateLimit, TypeForStatus(429))
	require.Equal(t, ErrTypeServer, TypeForStatus(502))
}

// TestUnquoteMatchesEncodingJSON: the fast path of Unquote reads a literal
// as encoding/json does, and leaves everything else to it.
func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	for _, lit := range []string{`""`, `"plain text"`, `"caf\u00e9"`, "\"caf\xc3\xa9\"", "\"\xff\xfe\"", `"a\"b"`, `"a\\b"`,
		"\"tab\there\"", `"\n"`, `"x`, `x"`, `"`, `"a"b"`, `"\ud83d\ude00"`, "\"\xed\xa0\x80\""} {
		var want, got string
		wantErr := json.Unmarshal([]byte(lit), &want)
		err := Unquote([]byte(lit), &got)
		if wantErr != nil {
			require.Error(t, err, "%q", lit)
			continue
		}
		require.NoError(t, err, "%q", lit)
		require.Equal(t, want, got, "%q", lit)
	}
}

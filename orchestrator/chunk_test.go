package orchestrator

import (
	"encoding/json"
	"testing"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/stretchr/testify/require"
)

func TestChunkReaderReadsJSONNotBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		finish  string
		content bool
		usage   bool
		isError bool
	}{
		{name: "compact content chunk", data: `{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`, content: true},
		// Regression (issue 10): a worker writing a space after each colon
		// made a complete stream end in a 502 with usage not patched.
		{name: "spaces after colons", data: `{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}`,
			finish: "stop", content: true, usage: true},
		{name: "other key order", data: `{"usage":null,"choices":[{"finish_reason":"length","delta":{"content":""},"index":0}],"object":"chat.completion.chunk"}`, finish: "length"},
		{name: "escaped content", data: `{"choices":[{"delta":{"content":"\u00e9\"x"}}]}`, content: true},
		{name: "empty content is no content", data: `{"choices":[{"delta":{"role":"assistant","content":""}}]}`},
		{name: "reasoning counts as output", data: `{"choices":[{"delta":{"reasoning_content":"think"}}]}`, content: true},
		{name: "newer reasoning key", data: `{"choices":[{"delta":{"reasoning":"think"}}]}`, content: true},
		{name: "tool call counts as output", data: `{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, content: true},
		{name: "completion text", data: `{"object":"text_completion","choices":[{"text":" a","finish_reason":null}]}`, content: true},
		{name: "whole chat response", data: `{"choices":[{"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}]}`, finish: "stop", content: true},
		{name: "text that mentions finish_reason is not one", data: `{"choices":[{"delta":{"content":"\"finish_reason\":\"stop\""}}]}`, content: true},
		{name: "usage chunk with no choices", data: `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, usage: true},
		{name: "nested error event", data: `{"error": {"message": "boom", "type": "server_error", "code": 500}}`, isError: true},
		{name: "vLLM's flat error", data: `{"object":"error","message":"boom","type":"BadRequestError","code":400}`, isError: true},
		{name: "null error is no error", data: `{"error":null,"choices":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := getChunkReader()
			defer putChunkReader(r)
			c, err := r.read([]byte(tc.data))
			require.NoError(t, err)
			require.Equal(t, tc.finish, c.finish)
			require.Equal(t, tc.content, c.content)
			require.Equal(t, tc.usage, c.usage != nil)
			require.Equal(t, tc.isError, c.isError)
		})
	}
}

func TestChunkReaderRejectsNonObjects(t *testing.T) {
	r := getChunkReader()
	defer putChunkReader(r)
	for _, data := range []string{`[1]`, `"x"`, `{"a":`, ``, `data: {}`} {
		_, err := r.read([]byte(data))
		require.Error(t, err, data)
	}
}

func TestRewritePatchesUsageByKey(t *testing.T) {
	ctx := &protocol.Context{PromptTokens: 1200, CachedTokens: 1024}
	r := getChunkReader()
	defer putChunkReader(r)
	in := `{"id": "x", "choices": [], "usage": {"prompt_tokens": 7, "total_tokens": 9, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 1}, "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0}}, "big": 18446744073709551615}`
	c, err := r.read([]byte(in))
	require.NoError(t, err)
	out, u := r.rewrite([]byte(in), c, ctx)
	require.JSONEq(t, `{"id":"x","choices":[],"usage":{"prompt_tokens":1200,"total_tokens":1202,"completion_tokens":2,
		"completion_tokens_details":{"reasoning_tokens":1},"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0}},
		"big":18446744073709551615}`, string(out))
	require.Contains(t, string(out), `18446744073709551615`, "64-bit integers are written back as they came")
	require.Equal(t, 1200, u.PromptTokens)
	require.Equal(t, 1024, u.CachedTokens())
	require.Equal(t, 2, u.CompletionTokens)

	t.Run("no context phase keeps the bytes", func(t *testing.T) {
		c, err := r.read([]byte(in))
		require.NoError(t, err)
		out, u := r.rewrite([]byte(in), c, nil)
		require.Equal(t, in, string(out))
		require.Equal(t, 7, u.PromptTokens)
	})
	t.Run("usage without details gains them", func(t *testing.T) {
		in := `{"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`
		c, err := r.read([]byte(in))
		require.NoError(t, err)
		out, _ := r.rewrite([]byte(in), c, ctx)
		require.JSONEq(t, `{"usage":{"prompt_tokens":1200,"completion_tokens":2,"total_tokens":1202,"prompt_tokens_details":{"cached_tokens":1024}}}`, string(out))
	})
}

// Regression (issue 10): a client must never see a finish reason OpenAI
// does not define (remote_decode, not_finished, ...).
func TestRewriteNormalisesFinishReason(t *testing.T) {
	r := getChunkReader()
	defer putChunkReader(r)
	for in, want := range map[string]string{
		`{"choices":[{"index":0,"delta":{},"finish_reason":"remote_decode"}]}`: `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"text":"","finish_reason":"not_finished"}]}`:   `{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`:    `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	} {
		c, err := r.read([]byte(in))
		require.NoError(t, err)
		out, _ := r.rewrite([]byte(in), c, nil)
		require.JSONEq(t, want, string(out))
	}
}

// Regression (issue 12, found by FuzzCompleteResponse): fastjson wrote the
// keys of a patched object back with Go's quoting, so a key holding a
// control character became "\x01", which is not JSON.
func TestRewriteWritesKeysAsJSON(t *testing.T) {
	ctx := &protocol.Context{PromptTokens: 30, CachedTokens: 20}
	r := getChunkReader()
	defer putChunkReader(r)
	for _, in := range []string{
		`{"\u0001":1,"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"\u000b\"\\":[]}}`,
		`{"k\u00e9y\ud83d\ude00":{"\u0007":"\u0007"},"choices":[{"\u001f":0,"finish_reason":"remote_decode"}]}`,
		`{"choices":[{"text":"a\u0000b","finish_reason":"not_finished","logprobs":{"tokens":[],"top":[{"\u0002":-1.5}]}}]}`,
	} {
		c, err := r.read([]byte(in))
		require.NoError(t, err)
		out, _ := r.rewrite([]byte(in), c, ctx)
		require.True(t, json.Valid(out), "invalid JSON out of %s:\n%q", in, out)
		var got, want map[string]any
		require.NoError(t, json.Unmarshal(out, &got))
		require.NoError(t, json.Unmarshal([]byte(in), &want))
		require.Equal(t, len(want), len(got), "keys kept")
		for k := range want {
			require.Contains(t, got, k)
		}
	}
}

// Regression (issue 12): a worker body repeating a key duet reads is not
// read, since fastjson takes the first copy and a client the last.
func TestChunkReaderRejectsDuplicateKeysItReads(t *testing.T) {
	r := getChunkReader()
	defer putChunkReader(r)
	for _, data := range []string{
		`{"usage":{"prompt_tokens":7},"usage":{"prompt_tokens":9}}`,
		`{"usage":{"prompt_tokens":7,"prompt_tokens":9}}`,
		`{"choices":[{"finish_reason":null,"finish_reason":"abort"}]}`,
		`{"choices":[],"choices":[{"finish_reason":"stop"}]}`,
		`{"error":null,"error":{"message":"x"}}`,
	} {
		_, err := r.read([]byte(data))
		require.ErrorIs(t, err, errDuplicateKey, data)
	}
	// Keys duet does not read may repeat.
	_, err := r.read([]byte(`{"id":"a","id":"b","choices":[{"index":0,"index":1,"finish_reason":"stop"}]}`))
	require.NoError(t, err)
}

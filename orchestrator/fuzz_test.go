package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/duet-serve/duet/orchestrator/internal/allocs"
	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/tokenizer"
)

// fuzzOrchestrator builds an Orchestrator without workers: the fuzz
// targets below only parse. The context length is small so that fuzzed
// prompts reach it; one extra session header is configured.
func fuzzOrchestrator(tb testing.TB) *Orchestrator {
	tb.Helper()
	cfg := Defaults()
	cfg.MaxModelLen = 2048
	cfg.DefaultMaxTokens = 256
	cfg.SessionHeaders = []string{"X-Tenant-Session"}
	cfg.MaxSessionIDLength = 64
	r, err := router.New(router.NewPool(), router.Defaults(), nil)
	require.NoError(tb, err)
	tok, err := tokenizer.New(tokenizer.Defaults())
	require.NoError(tb, err)
	o, err := New(Options{Config: cfg, Router: r, Tokenizer: tok, Log: zap.NewNop()})
	require.NoError(tb, err)
	return o
}

// parseSeeds are client bodies: the adapters' golden requests (real
// clients' shapes) and every field parse reads, in valid and invalid
// forms.
var parseSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":16,"min_tokens":2,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:,"}}]}]}`,
	`{"model":"m","max_completion_tokens":8,"max_tokens":9000,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"42"}]}`,
	`{"model":"m","prompt":"Once upon a time","max_tokens":4,"stop":["\n"],"cache_salt":"tenant-a","user":"u1"}`,
	`{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34]}`,
	`{"model":"m","prompt":[[1,2,3]]}`, `{"model":"m","prompt":["a","b"]}`, `{"model":"m","prompt":""}`, `{"model":"m","prompt":[]}`,
	`{"model":"m","prompt":"x","conversation_params":{"conversation_id":"conv-1"}}`,
	`{"model":"m","prompt":"x","disaggregated_params":{"conversation_id":"conv 2","ctx_request_id":1},"kv_transfer_params":{"remote_host":"h"},"bootstrap_room":3,"prompt_token_ids":[1]}`,
	`{"model":"m","prompt":"x","kv\u005ftransfer_params":{}}`,
	`{"model":"m","prompt":"x","n":2}`, `{"model":"m","prompt":"x","max_tokens":0}`, `{"model":"m","prompt":"x","max_tokens":9223372036854775807}`,
	`{"model":"m","prompt":"x","max_tokens":2040}`, `{"model":"m","prompt":"x","min_tokens":9,"max_tokens":3}`, `{"model":"m","prompt":"x","stream_options":{}}`,
	`{"model":"m","prompt":"x","max_tokens":1.5}`, `{"model":"","prompt":"x"}`, `{"model":"m","messages":[{"role":"robot","content":"x"}]}`,
	`{"model":"m","messages":[]}`, `{"model":"m","messages":[{"role":"user","content":{"a":1}}]}`,
	`null`, `[]`, `"x"`, `{`, ``, `{"model":"m","prompt":"x"} trailing`,
}

// addParseSeeds adds parseSeeds for both endpoints and the adapters'
// golden client bodies for theirs.
func addParseSeeds(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s), uint8(protocol.EndpointChat), "")
		f.Add([]byte(s), uint8(protocol.EndpointCompletions), "sess-1")
	}
	paths, err := filepath.Glob(filepath.Join("protocol", "*", "testdata", "requests", "*.json"))
	require.NoError(f, err)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		ep := protocol.EndpointChat
		if strings.HasPrefix(filepath.Base(p), "completion") {
			ep = protocol.EndpointCompletions
		}
		f.Add(b, uint8(ep), "")
	}
}

// FuzzParse feeds parse arbitrary bodies. It must reject with a 4xx
// *Error, or accept only a JSON object and agree with what an engine reads
// in the same body: the engines (Python) match keys exactly, the last of
// duplicates winning. An accepted request fits the context length, its
// forwarded body is a JSON object without any internal field that keeps
// every other client key, and its hashes are its tokens'. parse never
// modifies the body and allocates at most a constant times its size.
func FuzzParse(f *testing.F) {
	addParseSeeds(f)
	o := fuzzOrchestrator(f)
	f.Fuzz(func(t *testing.T, body []byte, endpoint uint8, sessionHeader string) {
		orig := bytes.Clone(body)
		in := Incoming{Endpoint: protocol.Endpoint(endpoint % 4), Body: body, RequestID: "r",
			Header: func(name string) string {
				if name == "X-Session-ID" {
					return sessionHeader
				}
				return ""
			}}
		var req *Request
		var err error
		allocated := allocs.By(len(body), func() { req, err = o.parse(in) })
		require.Equal(t, orig, body, "parse modified the body")
		require.LessOrEqual(t, allocated, uint64(64*len(body)+256<<10), "allocated %d bytes for a %d-byte body", allocated, len(body))
		if err != nil {
			requireClientError(t, err)
			return
		}
		checkAccepted(t, o, in, req)
	})
}

// requireClientError checks that a rejection is a 4xx *Error with a valid
// OpenAI error body.
func requireClientError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	require.True(t, errors.As(err, &e), "rejection %v is not an *Error", err)
	require.GreaterOrEqual(t, e.Status, 400, "%v", err)
	require.Less(t, e.Status, 500, "%v", err)
	require.NotEmpty(t, e.Message)
	require.True(t, json.Valid(e.JSON()), "invalid error body %q", e.JSON())
}

// checkAccepted checks an accepted request against its body.
func checkAccepted(t *testing.T, o *Orchestrator, in Incoming, req *Request) {
	t.Helper()
	require.True(t, in.Endpoint.Valid())
	top := engineView(t, in.Body)
	model, ok := top["model"]
	require.True(t, ok, "accepted a body without the key \"model\": %s", in.Body)
	require.Equal(t, jsonString(t, model), req.Model, "model differs from the engine's")
	require.Equal(t, jsonBool(t, top["stream"]), req.Stream, "stream differs from the engine's")
	require.True(t, !req.IncludeUsage || req.Stream)
	limitKey := "max_tokens"
	if in.Endpoint == protocol.EndpointChat && !isNull(top["max_completion_tokens"]) {
		limitKey = "max_completion_tokens"
	}
	if raw := top[limitKey]; !isNull(raw) {
		require.Equal(t, strings.TrimSpace(string(raw)), strconv.Itoa(req.MaxTokens), "%s differs from the engine's", limitKey)
	}
	require.GreaterOrEqual(t, req.MaxTokens, 1)
	require.NotEmpty(t, req.Tokens)
	require.LessOrEqual(t, len(req.Tokens)+req.MaxTokens, o.cfg.ModelLen(req.Model), "over the context length")
	require.Equal(t, tokenizer.SaltedBlockHashes(req.Tokens, o.router.BlockSize(), req.CacheSalt), req.Hashes)
	if req.SessionKey != "" {
		require.NoError(t, CheckID(req.SessionKey, o.cfg.MaxSessionIDLength))
	}

	fwd := engineView(t, req.Body)
	for _, k := range disagg.InternalFields {
		require.NotContains(t, fwd, k, "internal field %q forwarded", k)
	}
	for k, v := range top {
		if !slices.Contains(disagg.InternalFields, k) {
			require.Contains(t, fwd, k, "client key %q dropped", k)
			require.JSONEq(t, string(v), string(fwd[k]), "client key %q changed", k)
		}
	}
}

// engineView decodes a body's top level as the engines do. It fails the
// test when the body is not a JSON object.
func engineView(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &top), "accepted a body that is not JSON: %q", body)
	require.NotNil(t, top, "accepted a body that is not a JSON object: %q", body)
	return top
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func jsonString(t *testing.T, raw json.RawMessage) string {
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "%s", raw)
	return s
}

func jsonBool(t *testing.T, raw json.RawMessage) bool {
	if isNull(raw) {
		return false
	}
	var b bool
	require.NoError(t, json.Unmarshal(raw, &b), "%s", raw)
	return b
}

// FuzzSessionKey checks the session key's sources and their order: the
// body's conversation_params then disaggregated_params conversation_id,
// then the session headers in order (the built-in ones, then the
// configured ones); the first non-empty one wins, and it must be printable
// ASCII without spaces within max_session_id_length, else the request is
// a 400 naming that source. parse reads the body fields the same way.
func FuzzSessionKey(f *testing.F) {
	for _, s := range []struct {
		conv, dis       string
		hasConv, hasDis bool
		header          uint8
		value           string
	}{
		{"conv-1", "", true, false, 0, ""}, {"", "dis-1", true, true, 0, "hdr"}, {"", "", false, false, 0, "hdr-1"},
		{"", "", false, false, 5, "tenant-7"}, {"a b", "", true, false, 0, ""}, {"", "", false, false, 2, "\x7f"},
		{strings.Repeat("k", 65), "", true, false, 0, ""}, {"é", "x", true, true, 3, "y"}, {"", "", true, true, 4, ""},
	} {
		f.Add(s.conv, s.hasConv, s.dis, s.hasDis, s.header, s.value)
	}
	o := fuzzOrchestrator(f)
	headers := append(slices.Clone(sessionHeaders), o.cfg.SessionHeaders...)
	f.Fuzz(func(t *testing.T, conv string, hasConv bool, dis string, hasDis bool, header uint8, value string) {
		name := headers[int(header)%len(headers)]
		hdr := func(h string) string {
			if h == name {
				return value
			}
			return ""
		}
		var fields conversationFields
		type source struct{ name, value string }
		var sources []source
		if hasConv {
			fields.ConversationParams = &conversationID{ConversationID: conv}
			sources = append(sources, source{"conversation_params.conversation_id", conv})
		}
		if hasDis {
			fields.DisaggregatedParams = &conversationID{ConversationID: dis}
			sources = append(sources, source{"disaggregated_params.conversation_id", dis})
		}
		sources = append(sources, source{name, value})

		key, err := o.sessionKey(fields, hdr)
		var want source
		for _, s := range sources {
			if s.value != "" {
				want = s
				break
			}
		}
		valid := len(want.value) <= o.cfg.MaxSessionIDLength
		for i := 0; i < len(want.value); i++ {
			valid = valid && want.value[i] > ' ' && want.value[i] <= '~'
		}
		if valid {
			require.NoError(t, err)
			require.Equal(t, want.value, key)
		} else {
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, http.StatusBadRequest, e.Status)
			require.Equal(t, want.name, e.Param)
			require.Empty(t, key)
		}

		// The same key through a body: JSON turns invalid UTF-8 into
		// U+FFFD, so compare with the fields as decoded.
		body := map[string]any{"model": "m", "prompt": "hi"}
		if hasConv {
			body["conversation_params"] = map[string]string{"conversation_id": conv}
		}
		if hasDis {
			body["disaggregated_params"] = map[string]string{"conversation_id": dis}
		}
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		var decoded conversationFields
		require.NoError(t, json.Unmarshal(raw, &decoded))
		wantKey, wantErr := o.sessionKey(decoded, hdr)
		req, err := o.parse(Incoming{Endpoint: protocol.EndpointCompletions, Body: raw, Header: hdr})
		if wantErr != nil {
			require.Equal(t, wantErr, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, wantKey, req.SessionKey)
	})
}

// completeSeeds are whole gen worker responses of the three engines, and
// stream events (the relay reads both with the same chunkReader).
var completeSeeds = []string{
	`{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`,
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":"remote_decode","stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":4,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}},"kv_transfer_params":null}`,
	`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"not_finished","disaggregated_params":{"ctx_request_id":18446744073709551615}}],"usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":null},"prompt_token_ids":[1,2,3]}`,
	`{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}`,
	`{"usage":null,"choices":[{"finish_reason":"length","delta":{"content":""},"index":0}],"object":"chat.completion.chunk"}`,
	`{"choices":[{"delta":{"content":"\u00e9\"x"}}]}`, `{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":null}}}`,
	`{"error": {"message": "boom", "type": "server_error", "code": 500}}`, `{"object":"error","message":"boom","type":"BadRequestError","code":400}`,
	`{"choices":[{"finish_reason":"abort"}]}`, `{"choices":[{"finish_reason":"repetition"},{"finish_reason":"stop"},{"finish_reason":7}]}`,
	`{"usage":[],"choices":"x"}`, `[1]`, `"x"`, `{"a":`, ``,
	`{"\u0069d":"x","choices":[{"finish_reason":"remote_decode","st\u006fp_reason":null}],"usage":{"prompt_tokens":2,"\u0020audio":0}}`,
}

// FuzzCompleteResponse feeds the chunk reader (completeResponse: read
// then rewrite) arbitrary valid JSON worker bodies, with and without a
// context phase to patch usage from. An accepted body gives valid JSON
// equal to the body except for the keys duet owns: usage's prompt,
// total and cached tokens (with a context phase) and engine-only finish
// reasons (which become "stop"); untouched bodies come back as they were.
func FuzzCompleteResponse(f *testing.F) {
	for _, s := range completeSeeds {
		f.Add([]byte(s), uint16(0), uint16(0))
		f.Add([]byte(s), uint16(40), uint16(32))
	}
	f.Fuzz(func(t *testing.T, body []byte, promptTokens, cachedTokens uint16) {
		var ctx *protocol.Context
		if promptTokens > 0 {
			ctx = &protocol.Context{PromptTokens: int(promptTokens), CachedTokens: int(cachedTokens)}
		}
		orig := bytes.Clone(body)
		var out []byte
		var u openai.Usage
		var err error
		allocated := allocs.By(len(body), func() { out, u, err = completeResponse(body, ctx) })
		require.Equal(t, orig, body, "completeResponse modified the body")
		// fastjson quotes the whole unparsed tail into its syntax errors
		// (~30 bytes allocated per byte of garbage): linear, but not small.
		require.LessOrEqual(t, allocated, uint64(64*len(body)+64<<10), "allocated %d bytes for a %d-byte body", allocated, len(body))
		if !json.Valid(body) || hasDuplicateKeys(body) {
			return // fastjson is lenient, and first-wins where engines are last-wins: no model to compare with
		}
		top, isObject := decodeNumbers(t, body).(map[string]any)
		if !isObject {
			require.Error(t, err, "accepted a body that is not an object")
			return
		}
		if errorBody(top) || failed(top) {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.True(t, json.Valid(out), "invalid JSON out of %q:\n%q", body, out)

		changed := false
		if usage, ok := top["usage"].(map[string]any); ok && ctx != nil {
			require.Equal(t, ctx.PromptTokens, u.PromptTokens)
			require.Equal(t, u.PromptTokens+u.CompletionTokens, u.TotalTokens)
			require.Equal(t, ctx.CachedTokens, u.CachedTokens())
			usage["prompt_tokens"] = json.Number(strconv.Itoa(u.PromptTokens))
			usage["total_tokens"] = json.Number(strconv.Itoa(u.TotalTokens))
			details, ok := usage["prompt_tokens_details"].(map[string]any)
			if !ok {
				details = map[string]any{}
				usage["prompt_tokens_details"] = details
			}
			details["cached_tokens"] = json.Number(strconv.Itoa(ctx.CachedTokens))
			changed = true
		}
		if choices, ok := top["choices"].([]any); ok {
			for _, c := range choices {
				if c, ok := c.(map[string]any); ok {
					if r, ok := c["finish_reason"].(string); ok && engineOnlyReason(r) {
						c["finish_reason"] = openai.FinishStop
						changed = true
					}
				}
			}
		}
		if !changed {
			require.Equal(t, string(body), string(out), "a body duet has nothing to change in must pass as is")
		}
		require.Equal(t, top, decodeNumbers(t, out), "out of %q:\n%q", body, out)
	})
}

// decodeNumbers decodes one JSON value keeping numbers as written.
func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v), "%q", b)
	return v
}

// errorBody reports a worker error: a non-null top-level error, or vLLM's
// {"object":"error"}.
func errorBody(top map[string]any) bool {
	e, hasError := top["error"]
	return (hasError && e != nil) || top["object"] == "error"
}

// failed reports a choice that ended with a failure reason.
func failed(top map[string]any) bool {
	choices, _ := top["choices"].([]any)
	for _, c := range choices {
		if c, ok := c.(map[string]any); ok {
			if r, ok := c["finish_reason"].(string); ok && openai.IsFailureFinishReason(r) {
				return true
			}
		}
	}
	return false
}

// hasDuplicateKeys reports whether any object in the valid JSON b has a
// key twice.
func hasDuplicateKeys(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	var walk func() bool
	walk = func() bool {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, _ := d.Token()
				if seen[k.(string)] || walk() {
					return true
				}
				seen[k.(string)] = true
			}
			_, _ = d.Token()
		case json.Delim('['):
			for d.More() {
				if walk() {
					return true
				}
			}
			_, _ = d.Token()
		}
		return false
	}
	return walk()
}

package sim

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

func TestBadInput(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.MaxBodyBytes = 4096
	w := startWorker(t, cfg)
	model := Defaults().Model
	tests := []struct {
		name      string
		method    string
		path      string
		body      any
		status    int
		wantParam string
		wantInMsg string
	}{
		{"empty body", "POST", "/v1/chat/completions", "", 400, "", "empty"},
		{"malformed JSON", "POST", "/v1/chat/completions", `{"model":`, 400, "", "invalid JSON"},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, "", "JSON object"},
		{"max_tokens wrong type", "POST", "/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}`, 400, "max_tokens", "an integer"},
		{"messages wrong type", "POST", "/v1/chat/completions", `{"model":"` + model + `","messages":"hi"}`, 400, "messages", ""},
		{"content wrong type", "POST", "/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":5}]}`, 400, "", "content"},
		{"missing model", "POST", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "x"}}}, 400, "model", "required"},
		{"unknown model", "POST", "/v1/chat/completions", map[string]any{"model": "gpt-9", "messages": []map[string]string{{"role": "user", "content": "x"}}}, 404, "model", "does not exist"},
		{"missing messages", "POST", "/v1/chat/completions", map[string]any{"model": model}, 400, "messages", "required"},
		{"empty messages", "POST", "/v1/chat/completions", map[string]any{"model": model, "messages": []any{}}, 400, "messages", ""},
		{"unknown role", "POST", "/v1/chat/completions", map[string]any{"model": model, "messages": []map[string]string{{"role": "wizard", "content": "x"}}}, 400, "messages[0].role", "wizard"},
		{"negative max_tokens", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"max_tokens": -1}), 400, "max_tokens", "at least 1"},
		{"zero max_completion_tokens", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"max_completion_tokens": 0}), 400, "max_tokens", "at least 1"},
		{"min_tokens above max", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"max_tokens": 2, "min_tokens": 3}), 400, "min_tokens", ""},
		{"negative min_tokens", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"min_tokens": -3}), 400, "min_tokens", ""},
		{"n > 1", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"n": 2}), 400, "n", ""},
		{"context window", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"max_tokens": 200000}), 400, "max_tokens", "maximum context length"},
		{"negative token id", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"prompt_token_ids": []int{1, -2}}), 400, "prompt_token_ids", "invalid token id"},
		{"missing prompt", "POST", "/v1/completions", map[string]any{"model": model}, 400, "prompt", "required"},
		{"empty prompt", "POST", "/v1/completions", completionReq("", nil), 400, "prompt", "empty"},
		{"batched prompt", "POST", "/v1/completions", completionReq([]string{"a", "b"}, nil), 400, "prompt", "batched"},
		{"prompt wrong type", "POST", "/v1/completions", completionReq(5, nil), 400, "", "prompt"},
		{"unknown request_type", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"disaggregated_params": map[string]any{"request_type": "both"}}), 400, "disaggregated_params.request_type", "valid:"},
		{"ctx_request_id overflows uint64", "POST", "/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":"x"}],"disaggregated_params":{"request_type":"generation_only","ctx_request_id":18446744073709551616}}`, 400, "", ""},
		{"generation_only without handle", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"disaggregated_params": map[string]any{"request_type": "generation_only"}}), 400, "disaggregated_params", "ctx_request_id"},
		{"garbage opaque state", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"disaggregated_params": map[string]any{
			"request_type": "generation_only", "ctx_request_id": 1, "encoded_opaque_state": "!!", "first_gen_tokens": []int{1}}}), 400, "disaggregated_params.encoded_opaque_state", "base64"},
		{"streaming context_only", "POST", "/v1/chat/completions", chatReq("x", map[string]any{"stream": true, "disaggregated_params": map[string]any{"request_type": "context_only"}}), 400, "stream", "stream:false"},
		{"body too large", "POST", "/v1/chat/completions", chatReq(strings.Repeat("x", 5000), nil), 413, "", "too large"},
		{"wrong method", "GET", "/v1/chat/completions", nil, 405, "", "method"},
		{"unknown path", "GET", "/v2/nothing", nil, 404, "", "no route"},
		{"bad pull body", "POST", pullPath, `{"key":5}`, 400, "key", ""},
		{"bad fault patch", "POST", "/admin/faults", `{"error_rate":2}`, 400, "", "error_rate"},
		{"unknown fault key", "POST", "/admin/faults", `{"typo":1}`, 400, "", "typo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, w.url+tt.path, tt.body, nil)
			require.Equal(t, tt.status, r.status, "body: %s", r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			e := r.errorBody(t)
			require.Equal(t, openai.TypeForStatus(tt.status), e.Error.Type)
			if tt.wantParam != "" {
				require.NotNil(t, e.Error.Param, "param")
				require.Equal(t, tt.wantParam, *e.Error.Param)
			}
			require.Contains(t, e.Error.Message, tt.wantInMsg)
		})
	}
	// Nothing was admitted, cached or counted as a cache query.
	st := w.s.sched.stats()
	require.Equal(t, st.KV.Capacity, st.KV.Free)
	require.Zero(t, w.s.metrics.prefixQueries.Load())
	require.Equal(t, http.StatusOK, do(t, "GET", w.url+"/health", nil, nil).status, "the worker still serves")
}

func TestHeadersTooLarge(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	r := do(t, http.MethodGet, w.url+"/health", nil, map[string]string{"X-Big": strings.Repeat("a", 20000)})
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, r.status)
	r.errorBody(t)
}

func TestRequestOverKVCapacity(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.KVCapacityBlocks = 4
	cfg.BlockSize = 16
	w := startWorker(t, cfg)
	r := post(t, w.url+"/v1/chat/completions", chatReq("x", map[string]any{"max_tokens": 100}))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errorBody(t).Error.Message, "KV cache")
}

func TestPromptOverContextWindow(t *testing.T) {
	cfg := testConfig("mixed", ProtocolVLLM)
	cfg.MaxModelLen = 50
	w := startWorker(t, cfg)
	ids := make([]int, 60)
	r := post(t, w.url+"/v1/completions", completionReq(ids, nil))
	require.Equal(t, http.StatusBadRequest, r.status)
	e := r.errorBody(t)
	require.Equal(t, "prompt", *e.Error.Param)
	require.JSONEq(t, `"context_length_exceeded"`, string(e.Error.Code))
	// Without max_tokens the limit shrinks to what the window leaves.
	resp := decodeCompletion(t, post(t, w.url+"/v1/completions", completionReq(ids[:45], nil)))
	require.Equal(t, 5, resp.Usage.CompletionTokens)
}

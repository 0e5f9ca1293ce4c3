package sim

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTRTLLMRejectsUnknownFields: trtllm-serve's request models forbid
// extra fields (pydantic extra="forbid"), so the sim with protocol trtllm
// answers an unknown top-level field with TensorRT-LLM's 400; fields
// TensorRT-LLM has (but OpenAI lacks) pass.
func TestTRTLLMRejectsUnknownFields(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	tests := []struct {
		name  string
		path  string
		body  map[string]any
		extra string // the rejected field's error line; "" accepted
	}{
		{"chat with TensorRT-LLM fields", "/v1/chat/completions", chatReq("ok", map[string]any{
			"add_generation_prompt": true, "min_tokens": 1, "max_completion_tokens": 3, "top_k": 5, "cache_salt": "s",
			"stream": true, "stream_options": map[string]any{"include_usage": true}, "disaggregated_params": nil,
			"prompt_token_ids": []int{1, 2, 3}}), ""},
		{"chat continue_final_message", "/v1/chat/completions", chatReq("x", map[string]any{"continue_final_message": true}),
			"{'type': 'extra_forbidden', 'loc': ('body', 'continue_final_message'), 'msg': 'Extra inputs are not permitted', 'input': True}"},
		{"chat field names are case-sensitive", "/v1/chat/completions", chatReq("x", map[string]any{"Max_Tokens": 2}),
			"{'type': 'extra_forbidden', 'loc': ('body', 'Max_Tokens'), 'msg': 'Extra inputs are not permitted', 'input': 2}"},
		{"completion with TensorRT-LLM fields", "/v1/completions", completionReq("ok", map[string]any{
			"max_tokens": 3, "min_tokens": 1, "detokenize": true, "return_context_logits": false, "echo": false}), ""},
		{"completion cache_salt", "/v1/completions", completionReq("x", map[string]any{"cache_salt": "it's"}),
			`{'type': 'extra_forbidden', 'loc': ('body', 'cache_salt'), 'msg': 'Extra inputs are not permitted', 'input': "it's"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, w.url+tt.path, tt.body)
			if tt.extra == "" {
				require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
				return
			}
			require.Equal(t, http.StatusBadRequest, r.status)
			want, _ := json.Marshal(flatError{Object: "error", Message: "1 validation error:\n  " + tt.extra, Type: "BadRequestError", Code: 400})
			require.Equal(t, string(want), string(r.body))
		})
	}
	require.Zero(t, w.s.metrics.requests[phaseAggregated][outcomeServerError].Load())
}

// TestTRTLLMUnknownFieldsListed: every extra field is one error line, in
// the order of the body, with the value's Python repr.
func TestTRTLLMUnknownFieldsListed(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	body := `{"nvext":{"a":[1,null,false],"b":"x"},"model":"` + Defaults().Model + `","messages":[{"role":"user","content":"x"}],"continue_final_message":true}`
	r := post(t, w.url+"/v1/chat/completions", body)
	require.Equal(t, http.StatusBadRequest, r.status)
	var e flatError
	require.NoError(t, json.Unmarshal(r.body, &e))
	require.Equal(t, "2 validation errors:\n"+
		"  {'type': 'extra_forbidden', 'loc': ('body', 'nvext'), 'msg': 'Extra inputs are not permitted', 'input': {'a': [1, None, False], 'b': 'x'}}\n"+
		"  {'type': 'extra_forbidden', 'loc': ('body', 'continue_final_message'), 'msg': 'Extra inputs are not permitted', 'input': True}",
		e.Message)
}

// vLLM and SGLang ignore fields they do not know.
func TestUnknownFieldsIgnoredByVLLMAndSGLang(t *testing.T) {
	for _, protocol := range []string{ProtocolVLLM, ProtocolSGLang} {
		t.Run(protocol, func(t *testing.T) {
			w := startWorker(t, testConfig("mixed", protocol))
			r := post(t, w.url+"/v1/chat/completions", chatReq("x", map[string]any{"max_tokens": 2, "nvext": map[string]any{"x": 1}}))
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
			r = post(t, w.url+"/v1/completions", completionReq("x", map[string]any{"max_tokens": 2, "nvext": 1}))
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		})
	}
}

func TestPyRepr(t *testing.T) {
	tests := []struct{ in, want string }{
		{`true`, `True`},
		{`null`, `None`},
		{`-1.5e3`, `-1.5e3`},
		{`"plain"`, `'plain'`},
		{`"it's"`, `"it's"`},
		{`"both ' and \""`, `'both \' and "'`},
		{`"tab\tback\\slash\u0001"`, `'tab\tback\\slash\x01'`},
		{`[]`, `[]`},
		{`{"k":{"n":[1,{"x":"y"}]},"z":{}}`, `{'k': {'n': [1, {'x': 'y'}]}, 'z': {}}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) { require.Equal(t, tt.want, pyReprJSON(json.RawMessage(tt.in))) })
	}
}

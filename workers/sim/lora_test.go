package sim

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// loraConfig is testConfig serving model "m" with adapters sql and chat.
func loraConfig(role, protocol string) Config {
	cfg := testConfig(role, protocol)
	cfg.Model, cfg.MaxModelLen = "m", 4096
	cfg.LoraAdapters = []string{"sql", "chat"}
	return cfg
}

// vLLM and SGLang list the adapters after the base model, each with its
// root, the base model as parent and a null max_model_len (vLLM with its
// own ModelPermission); TensorRT-LLM lists the base model only.
func TestLoRAModelList(t *testing.T) {
	perm := `"permission":[{"id":"PERM","object":"model_permission","created":CREATED,"allow_create_engine":false,
		"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,
		"organization":"*","group":null,"is_blocking":false}]`
	for _, tc := range []struct {
		protocol, want string
	}{
		{ProtocolVLLM, `{"object":"list","data":[
			{"id":"m","object":"model","created":CREATED,"owned_by":"vllm","root":"m","parent":null,"max_model_len":4096,` + perm + `},
			{"id":"sql","object":"model","created":CREATED,"owned_by":"vllm","root":"/adapters/sql","parent":"m","max_model_len":null,` + perm + `},
			{"id":"chat","object":"model","created":CREATED,"owned_by":"vllm","root":"/adapters/chat","parent":"m","max_model_len":null,` + perm + `}]}`},
		{ProtocolSGLang, `{"object":"list","data":[
			{"id":"m","object":"model","created":CREATED,"owned_by":"sglang","root":"m","parent":null,"max_model_len":4096},
			{"id":"sql","object":"model","created":CREATED,"owned_by":"sglang","root":"/adapters/sql","parent":"m","max_model_len":null},
			{"id":"chat","object":"model","created":CREATED,"owned_by":"sglang","root":"/adapters/chat","parent":"m","max_model_len":null}]}`},
		{ProtocolTRTLLM, `{"object":"list","data":[{"id":"m","object":"model","created":CREATED,"owned_by":"tensorrt_llm"}]}`},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			w := startWorker(t, loraConfig("mixed", tc.protocol))
			r := do(t, http.MethodGet, w.url+"/v1/models", nil, nil)
			require.Equal(t, http.StatusOK, r.status)
			perms := regexp.MustCompile(`"modelperm-[0-9a-f]{32}"`).FindAllString(string(r.body), -1)
			if tc.protocol == ProtocolVLLM {
				require.Len(t, perms, 3)
				require.NotEqual(t, perms[0], perms[1], "each card has its own ModelPermission")
			}
			body := regexp.MustCompile(`"modelperm-[0-9a-f]{32}"`).ReplaceAllString(string(r.body), `"PERM"`)
			require.JSONEq(t, strings.ReplaceAll(tc.want, "CREATED", strconv.FormatInt(w.s.created, 10)), body)
		})
	}
}

// trtLoRA is a valid TensorRT-LLM lora_request for adapter name.
func trtLoRA(name string) map[string]any {
	return map[string]any{"lora_name": name, "lora_int_id": 1, "lora_path": adapterRoot(name)}
}

// Each protocol selects the adapter its engine's way; what a request does
// not select is the base model.
func TestLoRASelection(t *testing.T) {
	tests := []struct {
		name     string
		protocol string
		body     map[string]any
		want     string // the adapter; "" the base model
	}{
		{"vllm base model", ProtocolVLLM, map[string]any{"model": "m"}, ""},
		{"vllm adapter as model", ProtocolVLLM, map[string]any{"model": "sql"}, "sql"},
		{"vllm ignores lora_path", ProtocolVLLM, map[string]any{"model": "m", "lora_path": "sql"}, ""},
		{"sglang base model", ProtocolSGLang, map[string]any{"model": "m"}, ""},
		{"sglang model:adapter", ProtocolSGLang, map[string]any{"model": "m:sql"}, "sql"},
		{"sglang parts are trimmed", ProtocolSGLang, map[string]any{"model": " m : chat "}, "chat"},
		{"sglang empty adapter part", ProtocolSGLang, map[string]any{"model": "m:  "}, ""},
		{"sglang lora_path", ProtocolSGLang, map[string]any{"model": "m", "lora_path": "chat"}, "chat"},
		{"sglang lora_path after an empty adapter part", ProtocolSGLang, map[string]any{"model": "m:", "lora_path": "chat"}, "chat"},
		{"sglang model's adapter wins", ProtocolSGLang, map[string]any{"model": "m:sql", "lora_path": "chat"}, "sql"},
		{"sglang null lora_path", ProtocolSGLang, map[string]any{"model": "m", "lora_path": nil}, ""},
		{"sglang empty lora_path", ProtocolSGLang, map[string]any{"model": "m", "lora_path": ""}, ""},
		{"trtllm base model", ProtocolTRTLLM, map[string]any{"model": "m"}, ""},
		{"trtllm null lora_request", ProtocolTRTLLM, map[string]any{"model": "m", "lora_request": nil}, ""},
		{"trtllm lora_request", ProtocolTRTLLM, map[string]any{"model": "m", "lora_request": trtLoRA("chat")}, "chat"},
		{"trtllm lora_request with every field", ProtocolTRTLLM, map[string]any{"model": "m", "lora_request": map[string]any{
			"lora_name": "sql", "lora_int_id": "7", "lora_path": "/adapters/sql/", "lora_ckpt_source": "nemo"}}, "sql"},
	}
	workers := map[string]*testWorker{}
	for _, p := range Protocols {
		workers[p] = startWorker(t, loraConfig("mixed", p))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := workers[tt.protocol]
			body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 2}
			for k, v := range tt.body {
				body[k] = v
			}
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			j, herr := w.s.parseJob(kindChat, raw, "")
			require.Nil(t, herr)
			require.Equal(t, tt.want, j.adapter)
			require.Equal(t, seqHashes(j.prompt, w.s.cfg.BlockSize, tt.want), j.hashes)

			resp := decodeChat(t, post(t, w.url+"/v1/chat/completions", body))
			require.Equal(t, tt.body["model"], resp.Model, "the response echoes the request's model")
		})
	}
}

// A request naming an adapter the worker does not serve gets the engine's
// error: vLLM's unknown-model 404 (the sim's OpenAI-shaped one, as for any
// unknown model), SGLang's 400 (in-stream when streaming), TensorRT-LLM's
// validation 400.
func TestLoRARejections(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name     string
		protocol string
		adapters []string // nil: loraConfig's
		body     string
		status   int
		errType  string
		message  string
		stream   bool // SGLang's in-stream error
	}{
		{"vllm unknown adapter", ProtocolVLLM, nil, `{"model":"nope",` + msgs + `}`, 404, "not_found_error",
			"The model `nope` does not exist (this worker serves `m`).", false},
		{"vllm has no model:adapter syntax", ProtocolVLLM, nil, `{"model":"m:sql",` + msgs + `}`, 404, "not_found_error",
			"The model `m:sql` does not exist (this worker serves `m`).", false},
		{"sglang bare adapter name is a model", ProtocolSGLang, nil, `{"model":"sql",` + msgs + `}`, 404, "NotFoundError",
			"The model `sql` does not exist (this worker serves `m`).", false},
		{"sglang unknown base", ProtocolSGLang, nil, `{"model":"other:sql",` + msgs + `}`, 404, "NotFoundError",
			"The model `other:sql` does not exist (this worker serves `m`).", false},
		{"sglang unknown adapter in model", ProtocolSGLang, nil, `{"model":"m:nope",` + msgs + `}`, 400, "BadRequestError",
			"Got LoRA adapter that has never been loaded: nope\nAll loaded adapters: dict_keys(['sql', 'chat']).", false},
		{"sglang unknown lora_path", ProtocolSGLang, nil, `{"model":"m","lora_path":"nope",` + msgs + `}`, 400, "BadRequestError",
			"Got LoRA adapter that has never been loaded: nope\nAll loaded adapters: dict_keys(['sql', 'chat']).", false},
		{"sglang unknown adapter streaming", ProtocolSGLang, nil, `{"model":"m:nope","stream":true,` + msgs + `}`, 400, "BadRequestError",
			"Got LoRA adapter that has never been loaded: nope\nAll loaded adapters: dict_keys(['sql', 'chat']).", true},
		{"sglang without adapters", ProtocolSGLang, []string{}, `{"model":"m:sql",` + msgs + `}`, 400, "BadRequestError",
			"LoRA adapter 'sql' was requested, but LoRA is not enabled. Please launch the server with --enable-lora flag " +
				"and preload adapters using --lora-paths or /load_lora_adapter endpoint.", false},
		{"sglang lora_path not a string", ProtocolSGLang, nil, `{"model":"m","lora_path":5,` + msgs + `}`, 400, "BadRequestError",
			"lora_path: expected one adapter name (a string), got 5", false},
		{"trtllm unknown lora_name", ProtocolTRTLLM, nil,
			`{"model":"m","lora_request":{"lora_name":"nope","lora_int_id":1,"lora_path":"/adapters/sql"},` + msgs + `}`, 400, "BadRequestError",
			"1 validation error:\n  {'type': 'value_error', 'loc': ('body', 'lora_request'), " +
				"'msg': 'Value error, lora_name (nope) is not a LoRA adapter of this worker (lora_adapters: sql, chat)', " +
				"'input': {'lora_name': 'nope', 'lora_int_id': 1, 'lora_path': '/adapters/sql'}, " +
				"'ctx': {'error': ValueError('lora_name (nope) is not a LoRA adapter of this worker (lora_adapters: sql, chat)')}}", false},
		{"trtllm unknown key in lora_request", ProtocolTRTLLM, nil,
			`{"model":"m","lora_request":{"lora_name":"sql","lora_int_id":1,"lora_path":"/adapters/sql","scale":2},` + msgs + `}`, 400,
			"BadRequestError", "1 validation error:\n  {'type': 'unexpected_keyword_argument', 'loc': ('body', 'lora_request', 'scale'), " +
				"'msg': 'Unexpected keyword argument', 'input': 2}", false},
		{"trtllm adapter name as model", ProtocolTRTLLM, nil, `{"model":"sql",` + msgs + `}`, 404, "not_found_error",
			"The model `sql` does not exist (this worker serves `m`).", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := loraConfig("mixed", tt.protocol)
			if tt.adapters != nil {
				cfg.LoraAdapters = tt.adapters
			}
			w := startWorker(t, cfg)
			r := post(t, w.url+"/v1/chat/completions", tt.body)
			if tt.stream {
				e := sglangStreamErr(t, r)
				require.Equal(t, flatError{Object: "error", Message: tt.message, Type: tt.errType, Code: tt.status}, e)
				return
			}
			require.Equal(t, tt.status, r.status, "body: %s", r.body)
			if tt.status == http.StatusNotFound && tt.protocol != ProtocolSGLang { // the sim's OpenAI-shaped 404
				e := r.errorBody(t)
				require.Equal(t, tt.message, e.Error.Message)
				require.Equal(t, tt.errType, e.Error.Type)
				return
			}
			var e flatError
			require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
			require.Equal(t, tt.message, e.Message)
			require.Equal(t, tt.errType, e.Type)
			require.Equal(t, tt.status, e.Code)
		})
	}
}

// Regression: a prompt shorter than one block has no prompt hashes, and
// extending that empty chain over the output used to start it unsalted,
// giving an adapter's output blocks the base model's hashes.
func TestExtendHashesFromEmptyChainKeepsAdapter(t *testing.T) {
	tokens := intsFrom(100, 10)
	require.Empty(t, seqHashes(tokens[:3], 4, "sql"))
	require.Equal(t, seqHashes(tokens, 4, "sql"), extendHashes(nil, tokens, 4, "sql"))
	require.Equal(t, seqHashes(tokens, 4, "sql"), extendHashes(seqHashes(tokens[:5], 4, "sql"), tokens, 4, "sql"))
	require.Equal(t, seqHashes(tokens, 4, ""), extendHashes(nil, tokens, 4, ""))
	require.NotEqual(t, seqHashes(tokens, 4, "sql"), seqHashes(tokens, 4, ""))
	require.NotEqual(t, seqHashes(tokens, 4, "sql"), seqHashes(tokens, 4, "chat"))
}

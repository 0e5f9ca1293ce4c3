package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// trtllm-serve validates lora_request as pydantic validates its LoRARequest
// dataclass: field errors, unknown keys, then __post_init__'s checks (the
// path must exist), plus the sim's own (lora_name must be its adapter);
// each error is one line of the 400's message, lora_request's before the
// top level's unknown keys.
func TestTRTLLMLoRARequestValidation(t *testing.T) {
	w := startWorker(t, loraConfig("mixed", ProtocolTRTLLM))
	const pre = `{"model":"m","prompt":"hi","max_tokens":2,"lora_request":`
	tests := []struct {
		name string
		body string
		want []string // the error lines; none: accepted
	}{
		{"valid", pre + `{"lora_name":"sql","lora_int_id":3,"lora_path":"/adapters/sql"}}`, nil},
		{"another adapter's existing path", pre + `{"lora_name":"sql","lora_int_id":3,"lora_path":"/adapters/chat"}}`, nil},
		{"integral float id", pre + `{"lora_name":"sql","lora_int_id":2.0,"lora_path":"/adapters/sql","lora_ckpt_source":"hf"}}`, nil},
		{"path defaults to empty, which does not exist", pre + `{"lora_name":"sql","lora_int_id":1}}`, []string{
			`{'type': 'value_error', 'loc': ('body', 'lora_request'), 'msg': 'Value error, lora_path () does not exist.', ` +
				`'input': {'lora_name': 'sql', 'lora_int_id': 1}, 'ctx': {'error': ValueError('lora_path () does not exist.')}}`}},
		{"path that does not exist", pre + `{"lora_name":"sql","lora_int_id":1,"lora_path":"/models/sql"}}`, []string{
			`{'type': 'value_error', 'loc': ('body', 'lora_request'), 'msg': 'Value error, lora_path (/models/sql) does not exist.', ` +
				`'input': {'lora_name': 'sql', 'lora_int_id': 1, 'lora_path': '/models/sql'}, ` +
				`'ctx': {'error': ValueError('lora_path (/models/sql) does not exist.')}}`}},
		{"ckpt source", pre + `{"lora_name":"sql","lora_int_id":1,"lora_path":"/adapters/sql","lora_ckpt_source":"pt"}}`, []string{
			`{'type': 'value_error', 'loc': ('body', 'lora_request'), 'msg': "Value error, lora_ckpt_source must be 'hf' or 'nemo', got 'pt'", ` +
				`'input': {'lora_name': 'sql', 'lora_int_id': 1, 'lora_path': '/adapters/sql', 'lora_ckpt_source': 'pt'}, ` +
				`'ctx': {'error': ValueError("lora_ckpt_source must be 'hf' or 'nemo', got 'pt'")}}`}},
		{"missing fields", pre + `{"lora_path":"/adapters/sql"}}`, []string{
			`{'type': 'missing', 'loc': ('body', 'lora_request', 'lora_name'), 'msg': 'Field required', 'input': {'lora_path': '/adapters/sql'}}`,
			`{'type': 'missing', 'loc': ('body', 'lora_request', 'lora_int_id'), 'msg': 'Field required', 'input': {'lora_path': '/adapters/sql'}}`}},
		{"mistyped fields and an unknown key", pre + `{"lora_name":5,"lora_int_id":1.5,"lora_path":null,"alpha":true}}`, []string{
			`{'type': 'string_type', 'loc': ('body', 'lora_request', 'lora_name'), 'msg': 'Input should be a valid string', 'input': 5}`,
			`{'type': 'int_from_float', 'loc': ('body', 'lora_request', 'lora_int_id'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 1.5}`,
			`{'type': 'string_type', 'loc': ('body', 'lora_request', 'lora_path'), 'msg': 'Input should be a valid string', 'input': None}`,
			`{'type': 'unexpected_keyword_argument', 'loc': ('body', 'lora_request', 'alpha'), 'msg': 'Unexpected keyword argument', 'input': True}`}},
		{"id not an integer", pre + `{"lora_name":"sql","lora_int_id":"one","lora_path":"/adapters/sql"}}`, []string{
			`{'type': 'int_parsing', 'loc': ('body', 'lora_request', 'lora_int_id'), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'one'}`}},
		{"not an object", pre + `"sql"}`, []string{
			`{'type': 'dataclass_type', 'loc': ('body', 'lora_request'), 'msg': 'Input should be a dictionary or an instance of LoRARequest', 'input': 'sql', 'ctx': {'class_name': 'LoRARequest'}}`}},
		{"lora_request's errors before the top level's", `{"nvext":1,"model":"m","prompt":"hi","lora_request":{"lora_name":"sql","lora_int_id":1,"lora_path":"/adapters/sql","Lora_Name":"x"}}`, []string{
			`{'type': 'unexpected_keyword_argument', 'loc': ('body', 'lora_request', 'Lora_Name'), 'msg': 'Unexpected keyword argument', 'input': 'x'}`,
			`{'type': 'extra_forbidden', 'loc': ('body', 'nvext'), 'msg': 'Extra inputs are not permitted', 'input': 1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, w.url+"/v1/completions", tt.body)
			if tt.want == nil {
				require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
				return
			}
			require.Equal(t, http.StatusBadRequest, r.status)
			msg := "1 validation error:"
			if len(tt.want) > 1 {
				msg = strconv.Itoa(len(tt.want)) + " validation errors:"
			}
			for _, line := range tt.want {
				msg += "\n  " + line
			}
			want, _ := json.Marshal(flatError{Object: "error", Message: msg, Type: "BadRequestError", Code: 400})
			require.Equal(t, string(want), string(r.body))
		})
	}
}

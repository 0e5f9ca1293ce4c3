package workers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseModelLen(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int // 0: an error
	}{
		{"vLLM base model", `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"vllm","root":"/models/m",
			"parent":null,"max_model_len":32768,"permission":[{"id":"modelperm-0","object":"model_permission"}]}]}`, 32768},
		{"SGLang base model", `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"sglang","root":"m","parent":null,"max_model_len":4096}]}`, 4096},
		{"parent absent", `{"data":[{"id":"m","max_model_len":4096}]}`, 4096},
		{"LoRA adapters ignored", `{"data":[{"id":"sql-lora","root":"/loras/sql","parent":"m","max_model_len":null},
			{"id":"m","parent":null,"max_model_len":8192},{"id":"other-lora","parent":"m","max_model_len":1024}]}`, 8192},
		{"several base models: the smallest", `{"data":[{"id":"a","parent":null,"max_model_len":8192},{"id":"b","parent":null,"max_model_len":4096}]}`, 4096},
		{"a base model without one among others", `{"data":[{"id":"adapter","root":"m"},{"id":"m","max_model_len":2048}]}`, 2048},
		{"field missing (vLLM before v0.5.0)", `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","root":"m","parent":null}]}`, 0},
		{"field null", `{"data":[{"id":"m","parent":null,"max_model_len":null}]}`, 0},
		{"TensorRT-LLM's model card", `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"tensorrt_llm"}]}`, 0},
		{"only LoRA adapters", `{"data":[{"id":"l","parent":"m","max_model_len":4096}]}`, 0},
		{"no models", `{"object":"list","data":[]}`, 0},
		{"zero", `{"data":[{"id":"m","max_model_len":0}]}`, 0},
		{"not a number", `{"data":[{"id":"m","max_model_len":"4096"}]}`, 0},
		{"garbage", `<html>Not Found</html>`, 0},
		{"empty", ``, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseModelLen([]byte(tc.body))
			if tc.want == 0 {
				require.Error(t, err)
				require.Zero(t, n)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, n)
		})
	}
}

func TestParseAdapters(t *testing.T) {
	require.Equal(t, []string{"sql-lora", "other-lora"}, ParseAdapters([]byte(`{"data":[{"id":"sql-lora","root":"/loras/sql","parent":"m","max_model_len":null},
		{"id":"m","parent":null,"max_model_len":8192},{"id":"other-lora","parent":"m"}]}`)), "vLLM's and SGLang's adapter entries")
	require.Empty(t, ParseAdapters([]byte(`{"object":"list","data":[{"id":"m","object":"model","owned_by":"tensorrt_llm"}]}`)))
	require.Empty(t, ParseAdapters([]byte(`{"data":[{"id":"m","parent":""}]}`)))
	require.Empty(t, ParseAdapters([]byte(`<html>`)))
}

package sim

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The model list has the shape of the imitated engine's: vLLM's and
// SGLang's report the context length (max_model_len) on the base model's
// card, with root and a null parent; TensorRT-LLM's card has no such field
// (TestModelsHealthMetrics).
func TestModelListAsTheEngineWritesIt(t *testing.T) {
	for _, tc := range []struct {
		protocol, want string
	}{
		{ProtocolVLLM, `{"object":"list","data":[{"id":"m","object":"model","created":CREATED,"owned_by":"vllm","root":"m",
			"parent":null,"max_model_len":4096,"permission":[{"id":"PERM","object":"model_permission","created":CREATED,
			"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,
			"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}`},
		{ProtocolSGLang, `{"object":"list","data":[{"id":"m","object":"model","created":CREATED,"owned_by":"sglang","root":"m",
			"parent":null,"max_model_len":4096}]}`},
		{ProtocolTRTLLM, `{"object":"list","data":[{"id":"m","object":"model","created":CREATED,"owned_by":"tensorrt_llm"}]}`},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			cfg := testConfig("mixed", tc.protocol)
			cfg.Model, cfg.MaxModelLen = "m", 4096
			w := startWorker(t, cfg)
			r := do(t, http.MethodGet, w.url+"/v1/models", nil, nil)
			require.Equal(t, http.StatusOK, r.status)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			body := regexp.MustCompile(`"modelperm-[0-9a-f]{32}"`).ReplaceAllString(string(r.body), `"PERM"`) // a fresh uuid4 hex in vLLM
			want := strings.ReplaceAll(tc.want, "CREATED", strconv.FormatInt(w.s.created, 10))
			require.JSONEq(t, want, body)
		})
	}
}

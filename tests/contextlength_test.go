package tests

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Regression: duet checked a request's context length against its own
// orchestrator.max_model_len (default 131072) only, so with workers
// started with a shorter context (vLLM's --max-model-len) a request that
// could not fit reached them. Workers that report their context length in
// /v1/models (vLLM, SGLang, sims speaking their protocols) now lower the
// limit, and duet's 400 names it; TensorRT-LLM's report none, so the
// configured limit stays.
func TestWorkersContextLengthLimitsRequests(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		reported int    // max_model_len in /cluster_info
		says     string // duet's 400 for max_tokens 131073
	}{
		{"vllm", 4096, "max_tokens must be <= the workers' context length (4096), got 131073"},
		{"trtllm", 0, "max_tokens must be <= max_model_len (131072), got 131073"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			d := startServe(t, serveOptions{protocol: tc.protocol, nCtx: 1, nGen: 1, simArgs: `, "--max-model-len", "4096"`})
			var ci struct {
				Workers []struct {
					ID          string `json:"id"`
					MaxModelLen *int   `json:"max_model_len"`
				} `json:"workers"`
			}
			require.Equal(t, http.StatusOK, getJSON(t, d.url+"/cluster_info", &ci))
			require.Len(t, ci.Workers, 2)
			for _, w := range ci.Workers {
				require.NotNil(t, w.MaxModelLen, w.ID)
				require.Equal(t, tc.reported, *w.MaxModelLen, w.ID)
			}

			code, _, body := d.chat(t, false, "hello", `,"max_tokens":131073`)
			require.Equal(t, http.StatusBadRequest, code, string(body))
			require.Contains(t, errorMessage(t, body), tc.says)

			code, _, body = d.chat(t, false, "hello", `,"max_tokens":4090`)
			require.Equal(t, http.StatusBadRequest, code, string(body))
			if tc.reported > 0 { // duet's own 400, before any worker call
				require.Contains(t, errorMessage(t, body), "the workers' context length is 4096 tokens; you requested")
			} else { // the sim's own, relayed from the context phase: duet knew no better
				require.Contains(t, errorMessage(t, body), "This model's maximum context length is 4096 tokens. However, you requested")
			}

			code, _, body = d.chat(t, false, "hello", `,"max_tokens":12`)
			require.Equal(t, http.StatusOK, code, string(body))
			d.requireIdle(t)
		})
	}
}

// errorMessage is the message of an OpenAI error body.
func errorMessage(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	return e.Error.Message
}

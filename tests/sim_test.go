package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startSim runs one `duet sim` process and waits for its health.
func startSim(t *testing.T, args ...string) string {
	t.Helper()
	port := freePorts(t, 1)[0]
	p := startDuet(t, append([]string{"sim", "--port", fmt.Sprint(port), "--time-scale", "0.02"}, args...)...)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHTTP(t, p, url+"/health", 30*time.Second)
	return url
}

const simModel = "meta-llama/Llama-3.1-8B-Instruct"

func TestSimMixedAnswersChat(t *testing.T) {
	url := startSim(t, "--role", "mixed")
	code, _, body := post(t, url+"/v1/chat/completions", `{"model":"`+simModel+`","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"object":"chat.completion"`)
}

func TestSimTRTLLMContextThenGeneration(t *testing.T) {
	ctx := startSim(t, "--role", "context", "--protocol", "trtllm", "--kv-transfer-timeout", "300ms")
	gen := startSim(t, "--role", "generation", "--protocol", "trtllm")
	prompt := strings.Repeat("A long shared prefix about mountains and valleys. ", 30)
	ctxReq := func(id int) string {
		return fmt.Sprintf(`{"model":"%s","messages":[{"role":"user","content":%q}],"max_tokens":8,"ignore_eos":true,
		  "disaggregated_params":{"request_type":"context_only","disagg_request_id":%d}}`, simModel, prompt, id)
	}
	code, _, body := post(t, ctx+"/v1/chat/completions", ctxReq(1<<41))
	require.Equal(t, http.StatusOK, code, string(body))
	var c struct {
		PromptTokenIDs []int `json:"prompt_token_ids"`
		Choices        []struct {
			FinishReason string          `json:"finish_reason"`
			Params       json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &c))
	require.Equal(t, "not_finished", c.Choices[0].FinishReason)
	require.NotEmpty(t, c.PromptTokenIDs)

	genReq := func(params json.RawMessage) string {
		var p map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(params, &p))
		p["request_type"] = json.RawMessage(`"generation_only"`)
		pb, _ := json.Marshal(p)
		return fmt.Sprintf(`{"model":"%s","messages":[{"role":"user","content":%q}],"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},
		  "disaggregated_params":%s}`, simModel, prompt, pb)
	}
	code, _, body = post(t, gen+"/v1/chat/completions", genReq(c.Choices[0].Params))
	require.Equal(t, http.StatusOK, code, string(body))
	requireChatStream(t, sseData(body), 8)

	code, _, body = post(t, gen+"/v1/chat/completions", genReq(c.Choices[0].Params))
	require.Equal(t, http.StatusBadRequest, code, "a handle is valid once: %s", body)

	// A second context request for the same prompt hits the cache.
	code, _, body = post(t, ctx+"/v1/chat/completions", ctxReq(1<<41+1))
	require.Equal(t, http.StatusOK, code)
	var c2 struct {
		Choices []struct {
			Params json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &c2))
	require.Greater(t, c2.Usage.cached(), c2.Usage.PromptTokens/2)

	time.Sleep(600 * time.Millisecond) // past kv_transfer_timeout
	code, _, body = post(t, gen+"/v1/chat/completions", genReq(c2.Choices[0].Params))
	require.Equal(t, http.StatusBadRequest, code, "an expired handle is rejected: %s", body)
}

func TestSimVLLMPrefillThenDecode(t *testing.T) {
	prefill := startSim(t, "--role", "context", "--protocol", "vllm")
	decode := startSim(t, "--role", "generation", "--protocol", "vllm")
	base := `"model":"` + simModel + `","messages":[{"role":"user","content":"Explain tides briefly."}]`
	code, _, body := post(t, prefill+"/v1/chat/completions",
		`{`+base+`,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`, "X-Request-Id", "v1")
	require.Equal(t, http.StatusOK, code, string(body))
	var p struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	require.NoError(t, json.Unmarshal(body, &p))
	require.Contains(t, string(p.KV), `"do_remote_prefill":true`)
	code, _, body = post(t, decode+"/v1/chat/completions", `{`+base+`,"max_tokens":6,"ignore_eos":true,"kv_transfer_params":`+string(p.KV)+`}`, "X-Request-Id", "v1")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"completion_tokens":6`)
	code, _, _ = post(t, decode+"/v1/chat/completions", `{`+base+`,"max_tokens":6,"kv_transfer_params":`+string(p.KV)+`}`)
	require.Equal(t, http.StatusBadRequest, code, "a spent handle is rejected")
}

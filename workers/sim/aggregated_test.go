package sim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

func modelledUs(t *testing.T, r httpResult) int {
	t.Helper()
	v, err := strconv.Atoi(r.header.Get(headerModelledUs))
	require.NoError(t, err, "header %s", headerModelledUs)
	return v
}

func TestAggregatedChat(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	r := post(t, w.url+"/v1/chat/completions", chatReq("Hello there", map[string]any{"max_tokens": 8}))
	resp := decodeChat(t, r)
	require.Equal(t, openai.ObjectChatCompletion, resp.Object)
	require.True(t, strings.HasPrefix(resp.ID, "chatcmpl-"))
	require.Equal(t, Defaults().Model, resp.Model)
	c := resp.Choices[0]
	require.Equal(t, "assistant", c.Message.Role)
	require.Equal(t, openai.FinishLength, *c.FinishReason)
	tok := testTokenizer(t, "cl100k_base")
	require.Len(t, tok.Encode(c.Message.Content.String()), 8)
	require.Equal(t, 8, resp.Usage.CompletionTokens)
	require.Equal(t, resp.Usage.PromptTokens+8, resp.Usage.TotalTokens)
	require.Equal(t, 0, resp.Usage.CachedTokens())
	require.Nil(t, resp.Choices[0].DisaggregatedParams)
	require.Nil(t, resp.PromptTokenIDs)
}

func TestAggregatedCompletionPromptShapes(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolVLLM))
	tok := testTokenizer(t, "cl100k_base")
	ids := tok.Encode("Once upon a time")
	tests := []struct {
		name   string
		prompt any
	}{
		{"string", "Once upon a time"},
		{"one string in a list", []string{"Once upon a time"}},
		{"token ids", ids},
		{"one token list", [][]int{ids}},
	}
	var texts []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := decodeCompletion(t, post(t, w.url+"/v1/completions", completionReq(tt.prompt, map[string]any{"max_tokens": 5})))
			require.Equal(t, openai.ObjectTextCompletion, resp.Object)
			require.Equal(t, len(ids), resp.Usage.PromptTokens)
			texts = append(texts, resp.Choices[0].Text)
		})
	}
	for _, txt := range texts {
		require.Equal(t, texts[0], txt, "the same prompt tokens give the same text in every shape")
	}
}

func TestRepeatedPrefixIsCachedAndFaster(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	body := chatReq(longText("repeat", 2000), map[string]any{"max_tokens": 2})
	first := post(t, w.url+"/v1/chat/completions", body)
	second := post(t, w.url+"/v1/chat/completions", body)
	r1, r2 := decodeChat(t, first), decodeChat(t, second)
	require.Equal(t, 0, r1.Usage.CachedTokens())
	prompt := r2.Usage.PromptTokens
	bs := Defaults().BlockSize
	require.Equal(t, (prompt-1)/bs*bs, r2.Usage.CachedTokens(), "every full block but the one holding the last token")
	require.Equal(t, strconv.Itoa(r2.Usage.CachedTokens()), second.header.Get(headerCachedTokens))
	require.Less(t, modelledUs(t, second)*10, modelledUs(t, first), "modelled prefill is much shorter on a hit")
	require.Equal(t, r1.Choices[0].Message.Content, r2.Choices[0].Message.Content, "deterministic output")
}

// TestMultiTurnHitsReplyBlocks: turn 2 repeats turn 1's prompt and reply,
// and finds both in the cache.
func TestMultiTurnHitsReplyBlocks(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	tok := testTokenizer(t, "cl100k_base")
	msgs := []map[string]any{{"role": "system", "content": longText("sys", 300)}, {"role": "user", "content": "Tell me about blocks."}}
	t1 := decodeChat(t, post(t, w.url+"/v1/chat/completions", map[string]any{"model": Defaults().Model, "messages": msgs, "max_tokens": 100}))
	reply := t1.Choices[0].Message.Content.String()
	msgs = append(msgs, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": "More."})
	t2 := decodeChat(t, post(t, w.url+"/v1/chat/completions", map[string]any{"model": Defaults().Model, "messages": msgs, "max_tokens": 4}))
	covered := t1.Usage.PromptTokens + len(tok.Encode(reply))
	bs := Defaults().BlockSize
	require.Equal(t, covered/bs*bs, t2.Usage.CachedTokens(), "turn 1's prompt and reply blocks are hit")
	require.Greater(t, t2.Usage.CachedTokens(), t1.Usage.PromptTokens)
}

func TestStopsAndLimits(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	w := startWorker(t, cfg)
	// The first words of the reply to this prompt, to build stop strings.
	base := chatReq("stop test", map[string]any{"max_tokens": 6})
	full := decodeChat(t, post(t, w.url+"/v1/chat/completions", base)).Choices[0].Message.Content.String()
	words := strings.Fields(full)
	require.Len(t, words, 6)

	tests := []struct {
		name       string
		extra      map[string]any
		wantText   string
		wantFinish string
		wantTokens int
	}{
		{"max_completion_tokens wins", map[string]any{"max_tokens": 6, "max_completion_tokens": 2}, " " + words[0] + " " + words[1], openai.FinishLength, 2},
		{"stop string excluded", map[string]any{"max_tokens": 6, "stop": " " + words[2]}, " " + words[0] + " " + words[1], openai.FinishStop, 3},
		{"stop list", map[string]any{"max_tokens": 6, "stop": []string{"zzz", words[1][:2]}}, " " + words[0] + " ", openai.FinishStop, 2},
		{"no match", map[string]any{"max_tokens": 6, "stop": "zzz"}, full, openai.FinishLength, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := decodeChat(t, post(t, w.url+"/v1/chat/completions", chatReq("stop test", tt.extra)))
			require.Equal(t, tt.wantText, resp.Choices[0].Message.Content.String())
			require.Equal(t, tt.wantFinish, *resp.Choices[0].FinishReason)
			require.Equal(t, tt.wantTokens, resp.Usage.CompletionTokens)
		})
	}
}

func TestEarlyEOS(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.EOSProbability = 0.999
	w := startWorker(t, cfg)
	tests := []struct {
		name       string
		extra      map[string]any
		wantTokens int
		wantFinish string
	}{
		{"stops at once", map[string]any{"max_tokens": 10}, 0, openai.FinishStop},
		{"min_tokens first", map[string]any{"max_tokens": 10, "min_tokens": 4}, 4, openai.FinishStop},
		{"ignore_eos", map[string]any{"max_tokens": 10, "ignore_eos": true}, 10, openai.FinishLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := decodeChat(t, post(t, w.url+"/v1/chat/completions", chatReq("eos", tt.extra)))
			require.Equal(t, tt.wantTokens, resp.Usage.CompletionTokens)
			require.Equal(t, tt.wantFinish, *resp.Choices[0].FinishReason)
		})
	}
}

func TestRequestIDHonoured(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolVLLM))
	r := do(t, http.MethodPost, w.url+"/v1/completions", completionReq("hi", map[string]any{"max_tokens": 1}), map[string]string{"X-Request-Id": "abc-123"})
	resp := decodeCompletion(t, r)
	require.Equal(t, "cmpl-abc-123", resp.ID)
	require.Equal(t, "abc-123", r.header.Get("X-Request-Id"))
}

func TestModelsHealthMetrics(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	models := do(t, http.MethodGet, w.url+"/v1/models", nil, nil)
	require.Equal(t, http.StatusOK, models.status)
	require.JSONEq(t, `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":`+
		strconv.FormatInt(w.s.created, 10)+`,"owned_by":"tensorrt_llm"}]}`, string(models.body), "TensorRT-LLM's model card: no max_model_len")
	require.Equal(t, http.StatusOK, do(t, http.MethodGet, w.url+"/health", nil, nil).status)

	body := chatReq(longText("metrics", 200), map[string]any{"max_tokens": 3})
	decodeChat(t, post(t, w.url+"/v1/chat/completions", body))
	hit := decodeChat(t, post(t, w.url+"/v1/chat/completions", body))

	m := do(t, http.MethodGet, w.url+"/metrics", nil, nil)
	require.Equal(t, http.StatusOK, m.status)
	text := string(m.body)
	label := `{model_name="meta-llama/Llama-3.1-8B-Instruct"}`
	for _, want := range []string{
		"# TYPE vllm:num_requests_running gauge",
		"vllm:num_requests_running" + label + " 0",
		"vllm:num_requests_waiting" + label + " 0",
		"vllm:kv_cache_usage_perc" + label + " 0",
		"# TYPE vllm:prefix_cache_queries_total counter",
		"vllm:prefix_cache_queries_total" + label + " " + strconv.Itoa(2*hit.Usage.PromptTokens),
		"vllm:prefix_cache_hits_total" + label + " " + strconv.Itoa(hit.Usage.CachedTokens()),
		"vllm:generation_tokens_total" + label + " 6",
		`duet_sim_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct",phase="aggregated",outcome="ok"} 2`,
		`duet_sim_kv_blocks{model_name="meta-llama/Llama-3.1-8B-Instruct",state="referenced"} 0`,
	} {
		require.Contains(t, text, want+"\n")
	}
}

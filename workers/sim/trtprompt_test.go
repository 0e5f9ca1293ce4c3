package sim

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTRTLLMChatPromptTokenIDs: TensorRT-LLM's chat takes the prompt from
// prompt_token_ids when it is set, skipping the chat template (messages is
// still required, and may be empty). That holds on a context-only leg, on
// its generation-only leg, and on an ordinary request (no
// disaggregated_params), which a generation or mixed worker prefills
// itself; all give the output a completion of the same token ids gives.
func TestTRTLLMChatPromptTokenIDs(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolTRTLLM))
	genW := startWorker(t, testConfig("generation", ProtocolTRTLLM))
	mixW := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	ids := intsFrom(2000, 100)
	want, _ := outputText(t, kindCompletion, post(t, mixW.url+"/v1/completions", completionReq(ids, map[string]any{"max_tokens": 6})), false)
	withMessages := map[string]any{"model": Defaults().Model, "prompt_token_ids": ids, "max_tokens": 6,
		"messages": []map[string]string{{"role": "user", "content": "not templated: prompt_token_ids wins"}}}
	noMessages := map[string]any{"model": Defaults().Model, "prompt_token_ids": ids, "max_tokens": 6, "messages": []any{}}

	tests := []struct {
		name   string
		w      *testWorker
		client map[string]any
	}{
		{"generation worker, plain request", genW, withMessages},
		{"generation worker, plain request, empty messages", genW, noMessages},
		{"mixed worker, plain request", mixW, withMessages},
		{"mixed worker, plain request, empty messages", mixW, noMessages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, tt.w.url+"/v1/chat/completions", tt.client)
			text, usage := outputText(t, kindChat, r, false)
			require.Equal(t, want, text)
			require.Equal(t, len(ids), usage.PromptTokens)
			require.Positive(t, modelledUs(t, r), "prefilled locally")
		})
	}
	t.Run("context_only then generation_only", func(t *testing.T) {
		for _, client := range []map[string]any{withMessages, noMessages} {
			leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
			require.Equal(t, ids, leg.promptID, "the context leg's prompt is the ids")
			text, usage := outputText(t, kindChat, post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg)), false)
			require.Equal(t, want, text)
			require.Equal(t, len(ids), usage.PromptTokens)
		}
		require.Zero(t, ctxW.s.sched.stats().Pins, "both handles were pulled")
	})
	t.Run("messages is still required", func(t *testing.T) {
		r := post(t, mixW.url+"/v1/chat/completions", map[string]any{"model": Defaults().Model, "prompt_token_ids": ids})
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, "messages", *r.errorBody(t).Error.Param)
	})
}

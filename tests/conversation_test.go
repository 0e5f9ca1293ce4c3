package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chatTurn is one exchange of a multi-turn conversation.
type chatTurn struct {
	status  int
	route   string
	ctx     string
	gen     string
	session string // X-Session-ID of the response
	reply   string
	usage   usage
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// converse sends messages and returns the turn with the model's reply.
func converse(t *testing.T, d *deployment, msgs []message, headers ...string) chatTurn {
	t.Helper()
	return converseWith(t, d, msgs, "", headers...)
}

// converseWith is converse with extra body fields (`,"key":value...`).
func converseWith(t *testing.T, d *deployment, msgs []message, extra string, headers ...string) chatTurn {
	t.Helper()
	mb, _ := json.Marshal(msgs)
	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":24,"ignore_eos":true,"messages":%s%s}`, mb, extra)
	code, hdr, out := post(t, d.url+"/v1/chat/completions", body, headers...)
	turn := chatTurn{status: code, route: hdr.Get("X-Duet-Route"), ctx: hdr.Get("X-Duet-Ctx-Worker"),
		gen: hdr.Get("X-Duet-Gen-Worker"), session: hdr.Get("X-Session-ID")}
	if code != http.StatusOK {
		return turn
	}
	var r struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(out, &r), string(out))
	turn.reply, turn.usage = r.Choices[0].Message.Content, r.Usage
	return turn
}

var systemPrompt = strings.Repeat("You are a careful assistant who answers questions about geography in detail. ", 12)

func TestConversationStickyTurnsReuseTheCache(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 3, nGen: 3})
	for s := 0; s < 3; s++ {
		msgs := []message{{"system", systemPrompt}}
		var first chatTurn
		for turn := 0; turn < 4; turn++ {
			msgs = append(msgs, message{"user", fmt.Sprintf("Session %d, question %d: tell me about river number %d.", s, turn, turn*7+s)})
			got := converse(t, d, msgs, "X-Correlation-ID", fmt.Sprint("conv-", s))
			require.Equal(t, http.StatusOK, got.status)
			if turn == 0 {
				first = got
				require.Contains(t, []string{"new", "cached"}, got.route, "placed by load, or where the system prompt is cached")
			} else {
				require.Equal(t, "sticky", got.route)
				require.Equal(t, first.ctx, got.ctx)
				require.Equal(t, first.gen, got.gen)
				require.Greater(t, got.usage.cached(), got.usage.PromptTokens/2, "turn %d reuses the pinned ctx worker's cache: %+v", turn, got.usage)
			}
			msgs = append(msgs, message{"assistant", got.reply})
		}
	}
	var ci struct {
		Policy   string `json:"policy"`
		Sessions int    `json:"sessions"`
		Workers  []struct {
			ID       string `json:"id"`
			Sessions int    `json:"sessions"`
		} `json:"workers"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, d.url+"/cluster_info", &ci))
	require.Equal(t, "conversation", ci.Policy)
	require.Equal(t, 3, ci.Sessions)
	pinned := 0
	for _, w := range ci.Workers {
		pinned += w.Sessions
	}
	require.Equal(t, 6, pinned, "each session pins one ctx and one gen worker")
	d.requireIdle(t)
}

func TestConversationImplicitContinuationWithoutID(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 3, nGen: 3})
	msgs := []message{{"system", systemPrompt}, {"user", "Where does the Danube start?"}}
	first := converse(t, d, msgs)
	require.Equal(t, http.StatusOK, first.status)
	require.Equal(t, "new", first.route)
	require.NotEmpty(t, first.session, "a minted session id comes back in X-Session-ID")
	// Another conversation with the same system prompt is another session,
	// placed where that prompt is cached.
	other := converse(t, d, []message{{"system", systemPrompt}, {"user", "Where does the Rhine start?"}})
	require.Equal(t, "cached", other.route)
	require.NotEqual(t, first.session, other.session)

	msgs = append(msgs, message{"assistant", first.reply}, message{"user", strings.Repeat("And where does it end, and which countries does it cross on the way? ", 20)})
	second := converse(t, d, msgs)
	require.Equal(t, http.StatusOK, second.status)
	require.Equal(t, "cached", second.route, "the worker holding the conversation's prefix is the cheapest")
	require.Equal(t, first.ctx, second.ctx)
	require.Equal(t, first.gen, second.gen, "the gen worker holding the prompt takes it")
	require.Greater(t, second.usage.cached(), second.usage.PromptTokens/3)

	// A client that sends the minted id back stays sticky.
	msgs = append(msgs, message{"assistant", second.reply}, message{"user", "Thanks!"})
	third := converse(t, d, msgs, "X-Session-ID", first.session)
	require.Equal(t, "sticky", third.route)
	require.Equal(t, first.ctx, third.ctx)
	d.requireIdle(t)
}

func TestConversationRejectsBadSessionIDs(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 1, nGen: 1})
	got := converse(t, d, []message{{"user", "hi"}}, "X-Session-ID", strings.Repeat("x", 300))
	require.Equal(t, http.StatusBadRequest, got.status)
	d.requireIdle(t)
}

// TestConversationCacheAwareConditionalDisaggStreaming pins a bug where a
// streamed turn never told the router what the gen worker held, so the
// local path never triggered for streaming clients.
func TestConversationCacheAwareConditionalDisaggStreaming(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2, extra: "  max_local_prefill_tokens: 100"})
	first := `{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":12,"ignore_eos":true,"messages":[{"role":"system","content":%q},{"role":"user","content":"Name a river."}]}`
	code, hdr, body := post(t, d.url+"/v1/chat/completions", fmt.Sprintf(first, systemPrompt), "X-Correlation-ID", "cads")
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotContains(t, hdr.Get("X-Duet-Route"), "+local")
	var reply strings.Builder
	for _, e := range sseData(body) {
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(e), &c) == nil && len(c.Choices) > 0 {
			reply.WriteString(c.Choices[0].Delta.Content)
		}
	}
	msgs := []message{{"system", systemPrompt}, {"user", "Name a river."}, {"assistant", reply.String()}, {"user", "Another?"}}
	second := converse(t, d, msgs, "X-Correlation-ID", "cads")
	require.Equal(t, "sticky+local", second.route)
	d.requireIdle(t)
}

func TestConversationCacheAwareConditionalDisagg(t *testing.T) {
	d := startServe(t, serveOptions{policy: "conversation", nCtx: 2, nGen: 2, extra: "  max_local_prefill_tokens: 100"})
	msgs := []message{{"system", systemPrompt}, {"user", "Name three long rivers."}}
	first := converse(t, d, msgs, "X-Correlation-ID", "cad")
	require.Equal(t, http.StatusOK, first.status)
	require.NotContains(t, first.route, "+local", "a new long prompt is disaggregated")
	msgs = append(msgs, message{"assistant", first.reply}, message{"user", "And the shortest?"})
	second := converse(t, d, msgs, "X-Correlation-ID", "cad")
	require.Equal(t, http.StatusOK, second.status)
	require.Equal(t, "sticky+local", second.route, "the gen worker holds all but a few tokens: it prefills locally")
	require.Equal(t, first.gen, second.gen)
	require.Greater(t, second.usage.cached(), second.usage.PromptTokens/2, "the gen worker's own cache: %+v", second.usage)
	d.requireIdle(t)
}

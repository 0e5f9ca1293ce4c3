package orchestrator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/duet-serve/duet/tokenizer"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// chatLeg streams a chat answer the way vLLM does: a role chunk, then one
// chunk per word of words, then (when complete) a finish chunk, a usage
// chunk reporting len(words) completion tokens, and [DONE]; every chunk
// carries id and created.
func chatLeg(id string, created int, words []string, complete bool) func(http.ResponseWriter, map[string]json.RawMessage) {
	return func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(choice string) {
			fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":\"m\",\"choices\":[%s]}\n\n", id, created, choice)
		}
		ev(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`)
		for _, word := range words {
			ev(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":null}`, word))
		}
		if !complete {
			return
		}
		ev(`{"index":0,"delta":{},"finish_reason":"length"}`)
		fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":%d,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":99,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
			id, created, len(words), 99+len(words))
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// firstDies serves the first generation call of all the workers that share
// it with first, every later one with then, and records the bodies of
// those later calls.
type firstDies struct {
	calls       atomic.Int32
	first, then func(http.ResponseWriter, map[string]json.RawMessage)
	mu          sync.Mutex
	later       []map[string]json.RawMessage
}

func (d *firstDies) serve(w http.ResponseWriter, b map[string]json.RawMessage) {
	if d.calls.Add(1) == 1 {
		d.first(w, b)
		return
	}
	d.mu.Lock()
	d.later = append(d.later, b)
	d.mu.Unlock()
	d.then(w, b)
}

// gens returns n gen workers sharing d.
func (d *firstDies) gens(t *testing.T, n int) []*fakeWorker {
	var ws []*fakeWorker
	for range n {
		ws = append(ws, newFakeWorker(t, d.serve))
	}
	return ws
}

// clientEvents decodes the data lines of a relayed stream (not [DONE]).
func clientEvents(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, line := range strings.Split(out, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
		evs = append(evs, ev)
	}
	return evs
}

// ctxVLLM answers a vLLM prefill with kv_transfer_params.
func ctxVLLM(w http.ResponseWriter, _ map[string]json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m",
	 "choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}],
	 "kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e"},
	 "usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":20}}}`)
}

func TestMigrationContinuesTheStream(t *testing.T) {
	t.Run("vllm continues the final message", func(t *testing.T) {
		cfg := testConfig()
		cfg.Protocol = "vllm"
		d := &firstDies{first: chatLeg("A", 111, []string{" one", " two", " three"}, false), then: chatLeg("B", 222, []string{" four", " five"}, true)}
		h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxVLLM)}, d.gens(t, 2))
		resp, out := h.run(testChatBody(true, `,"max_tokens":5,"min_tokens":4,"stream_options":{"include_usage":true}`), nil)
		require.Equal(t, http.StatusOK, resp.Status)
		require.Len(t, d.later, 1)
		cont := d.later[0]
		var msgs []map[string]any
		require.NoError(t, json.Unmarshal(cont["messages"], &msgs))
		require.Equal(t, []map[string]any{{"role": "user", "content": "hello there"}, {"role": "assistant", "content": " one two three"}}, msgs)
		require.JSONEq(t, "true", string(cont["continue_final_message"]))
		require.JSONEq(t, "false", string(cont["add_generation_prompt"]))
		require.JSONEq(t, "2", string(cont["max_tokens"]), "the limit less the 3 tokens sent")
		require.JSONEq(t, "1", string(cont["min_tokens"]))
		requireOneAnswer(t, out, " one two three four five", 5)
	})
	t.Run("trtllm gets the continuation as token ids", func(t *testing.T) {
		ctx := newFakeWorker(t, ctxOK)
		d := &firstDies{first: chatLeg("A", 111, []string{" one", " two", " three"}, false), then: chatLeg("B", 222, []string{" four", " five"}, true)}
		h := newHarness(t, testConfig(), []*fakeWorker{ctx}, d.gens(t, 2))
		resp, out := h.run(testChatBody(true, `,"max_tokens":5,"stream_options":{"include_usage":true}`), nil)
		require.Equal(t, http.StatusOK, resp.Status)
		calls := ctx.calls()
		require.Len(t, calls, 2, "the first prefill and the continuation's")
		cont := calls[1]
		require.JSONEq(t, string(calls[0]["messages"]), string(cont["messages"]), "the client's messages as they were")
		require.NotContains(t, cont, "continue_final_message", "TensorRT-LLM forbids the field")
		want, err := h.o.tok.EncodeChat(tokenizer.Chat{Messages: []tokenizer.ChatMessage{{Role: "user", Content: "hello there"},
			{Role: "assistant", Content: " one two three"}}, ContinueFinalMessage: true})
		require.NoError(t, err)
		wantJSON, _ := json.Marshal(want)
		require.JSONEq(t, string(wantJSON), string(cont["prompt_token_ids"]))
		require.JSONEq(t, "2", string(cont["max_tokens"]))
		requireOneAnswer(t, out, " one two three four five", 5)
	})
}

// requireOneAnswer checks that out is one stream with the first leg's id
// and created time, one role, one finish reason, text, usage counting
// completion tokens, and one [DONE].
func requireOneAnswer(t *testing.T, out, text string, completion int) {
	t.Helper()
	var got strings.Builder
	roles, finishes := 0, 0
	evs := clientEvents(t, out)
	for _, ev := range evs {
		require.Equal(t, "A", ev["id"])
		require.EqualValues(t, 111, ev["created"])
		for _, c := range ev["choices"].([]any) {
			choice := c.(map[string]any)
			delta, _ := choice["delta"].(map[string]any)
			if _, ok := delta["role"]; ok {
				roles++
			}
			if s, ok := delta["content"].(string); ok {
				got.WriteString(s)
			}
			if choice["finish_reason"] != nil {
				finishes++
			}
		}
	}
	require.Equal(t, text, got.String(), "nothing lost, nothing twice")
	require.Equal(t, 1, roles)
	require.Equal(t, 1, finishes)
	usage := evs[len(evs)-1]["usage"].(map[string]any)
	require.EqualValues(t, completion, usage["completion_tokens"], "the tokens of both legs")
	require.EqualValues(t, 30, usage["prompt_tokens"], "the first leg's prompt, not the continuation's")
	require.Equal(t, usage["prompt_tokens"].(float64)+float64(completion), usage["total_tokens"])
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
	require.Equal(t, 1, strings.Count(out, "[DONE]"))
}

func TestMigrationRefusedKeepsTheOldFailure(t *testing.T) {
	for _, c := range []struct{ name, extra string }{
		{"logprobs", `,"logprobs":true`},
		{"seed", `,"seed":7`},
		{"structured output", `,"response_format":{"type":"json_object"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &firstDies{first: chatLeg("A", 1, []string{" a"}, false), then: chatLeg("B", 2, []string{" x"}, true)}
			h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, d.gens(t, 2))
			_, out := h.run(testChatBody(true, c.extra), nil)
			require.Contains(t, out, "generation worker ended the stream without [DONE] or a finish_reason")
			require.Empty(t, d.later)
		})
	}
}

func TestMigrationLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMigrations = 1
	var calls atomic.Int32
	dying := func(w http.ResponseWriter, b map[string]json.RawMessage) {
		calls.Add(1)
		chatLeg("A", 1, []string{" a"}, false)(w, b)
	}
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)},
		[]*fakeWorker{newFakeWorker(t, dying), newFakeWorker(t, dying), newFakeWorker(t, dying)})
	_, out := h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, "without [DONE] or a finish_reason")
	require.EqualValues(t, 2, calls.Load(), "the first leg and one migration")
}

func TestMigratedErrorEventIsNotRelayed(t *testing.T) {
	failing := func(w http.ResponseWriter, b map[string]json.RawMessage) {
		chatLeg("A", 1, []string{" a"}, false)(w, b)
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"Internal server error\",\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}\n\ndata: [DONE]\n\n")
	}
	d := &firstDies{first: failing, then: chatLeg("B", 2, []string{" b"}, true)}
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, d.gens(t, 2))
	resp, out := h.run(testChatBody(true, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.NotContains(t, out, "Internal server error")
	require.Contains(t, out, `" b"`)

	// With nowhere to go, the worker's own error event reaches the client.
	h = newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, failing)})
	_, out = h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, `"message":"Internal server error"`)
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
}

func TestContinuationBodies(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"chat adds the answer as the final message",
			`{"messages":[{"role":"user","content":"q"}],"max_completion_tokens":10}`,
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":" so far"}],"max_completion_tokens":8,"continue_final_message":true,"add_generation_prompt":false}`},
		{"chat that continued its own message grows it",
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Sure:"}],"continue_final_message":true,"add_generation_prompt":false}`,
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Sure: so far"}],"continue_final_message":true,"add_generation_prompt":false}`},
		{"list content gets a text part",
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"Sure:"}]}],"continue_final_message":true}`,
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"Sure:"},{"type":"text","text":" so far"}]}],"continue_final_message":true,"add_generation_prompt":false}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(c.body), &body))
			require.True(t, reduceLimits(body, 2))
			require.NoError(t, continueChat(body, []byte(" so far")))
			got, err := json.Marshal(body)
			require.NoError(t, err)
			require.JSONEq(t, c.want, string(got))
		})
	}
	h := newHarness(t, testConfig(), nil, nil)
	for _, c := range []struct{ prompt, want string }{
		{`"Once"`, `"Once upon"`},
		{`["Once"]`, `"Once upon"`},
		{`[1,2]`, fmt.Sprint(`[1,2,`, strings.Trim(fmt.Sprint(h.o.tok.Encode(" upon")), "[]"), `]`)},
	} {
		body := map[string]json.RawMessage{"prompt": json.RawMessage(c.prompt)}
		require.NoError(t, h.o.continueCompletion(body, []byte(" upon")), c.prompt)
		require.JSONEq(t, c.want, string(body["prompt"]), c.prompt)
	}
	body := map[string]json.RawMessage{"prompt": json.RawMessage(`["a","b"]`)}
	require.Error(t, h.o.continueCompletion(body, []byte(" upon")), "several prompts")
	require.False(t, reduceLimits(map[string]json.RawMessage{"max_tokens": json.RawMessage("3")}, 3), "nothing left to generate")
}

func TestMigrationReportedOnlyWhenAsked(t *testing.T) {
	for _, ask := range []bool{false, true} {
		d := &firstDies{first: chatLeg("A", 111, []string{" one"}, false), then: chatLeg("B", 222, []string{" two"}, true)}
		h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, d.gens(t, 2))
		hdr := map[string]string{}
		if ask {
			hdr[HeaderReportMigrations] = "1"
		}
		_, out := h.run(testChatBody(true, ""), hdr)
		if !ask {
			require.NotContains(t, out, "duet-migration", "the OpenAI stream is unchanged by default")
			continue
		}
		i := strings.Index(out, ": duet-migration {")
		require.Positive(t, i)
		var r migrationReport
		require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out[i+len(": duet-migration "):], "\n", 2)[0]), &r))
		require.Equal(t, failDied, r.Failure)
		require.Equal(t, 1, r.SentTokens)
		require.ElementsMatch(t, []string{"gen-0", "gen-1"}, []string{r.From, r.To})
		require.Less(t, i, strings.Index(out, `" two"`), "before the continuation")
	}
}

func TestMigrationOffIsCounted(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMigrations = 0
	d := &firstDies{first: chatLeg("A", 1, []string{" a"}, false), then: chatLeg("B", 2, []string{" b"}, true)}
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, d.gens(t, 2))
	_, out := h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, "without [DONE] or a finish_reason")
	require.Empty(t, d.later)
	require.Equal(t, 1.0, testutil.ToFloat64(h.o.metrics.migrations.WithLabelValues(failDied, outcomeOff)))
}

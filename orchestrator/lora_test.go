package orchestrator

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// withAdapters gives the harness's ctx-1 and gen-1 the adapter sql.
func withAdapters(h *harness) {
	for i := range h.members {
		if h.members[i].ID == "ctx-1" || h.members[i].ID == "gen-1" {
			h.members[i].Adapters = []string{"sql"}
		}
	}
	h.pool.Sync(h.members)
}

func loraHarness(t *testing.T, protocol string) *harness {
	cfg := testConfig()
	cfg.Protocol, cfg.Models = protocol, []string{"m"}
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK), newFakeWorker(t, ctxOK)},
		[]*fakeWorker{newFakeWorker(t, genStream(1, true)), newFakeWorker(t, genStream(1, true))})
	withAdapters(h)
	return h
}

func TestAdapterOfARequest(t *testing.T) {
	const prompt = `"messages":[{"role":"user","content":"hello there"}]`
	cases := []struct {
		protocol, body string
		adapter        string
		status         int
		message        string
	}{
		{"vllm", `{"model":"m",` + prompt + `}`, "", 0, ""},
		{"vllm", `{"model":"sql",` + prompt + `}`, "sql", 0, ""},
		{"vllm", `{"model":"code",` + prompt + `}`, "", http.StatusNotFound, `model \"code\" does not exist (served: m, sql)`},
		{"vllm", `{"model":"m","lora_request":{"lora_name":"sql"},` + prompt + `}`, "", 0, ""}, // not vLLM's field
		{"sglang", `{"model":"m:sql",` + prompt + `}`, "sql", 0, ""},
		{"sglang", `{"model":"m","lora_path":"sql",` + prompt + `}`, "sql", 0, ""},
		{"sglang", `{"model":"m:sql","lora_path":"other",` + prompt + `}`, "sql", 0, ""}, // the model's adapter wins
		{"sglang", `{"model":"m","lora_path":["sql"],` + prompt + `}`, "", 0, ""},        // a batch's list: none
		{"sglang", `{"model":"m:code",` + prompt + `}`, "", http.StatusBadRequest, `LoRA adapter \"code\" is not served by any worker (served: sql)`},
		{"sglang", `{"model":"sql",` + prompt + `}`, "", http.StatusNotFound, `model \"sql\" does not exist (served: m)`},
		{"trtllm", `{"model":"m","lora_request":{"lora_name":"sql","lora_int_id":1,"lora_path":"/a/sql"},` + prompt + `}`, "sql", 0, ""},
		{"trtllm", `{"model":"m","lora_request":{"lora_name":"code","lora_int_id":2},` + prompt + `}`, "", http.StatusBadRequest, `"param":"lora_request.lora_name"`},
		{"trtllm", `{"model":"sql",` + prompt + `}`, "", http.StatusNotFound, `model \"sql\" does not exist (served: m)`},
	}
	for _, c := range cases {
		t.Run(c.protocol+" "+c.body, func(t *testing.T) {
			h := loraHarness(t, c.protocol)
			req, err := h.o.parse(Incoming{Endpoint: 1, Body: []byte(c.body)})
			if c.status != 0 {
				e := AsError(err)
				require.Equal(t, c.status, e.Status, "%v", err)
				require.Contains(t, string(e.JSON()), c.message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.adapter, req.Adapter)
		})
	}
}

// An adapter's prompts share no cache credit with the base model's or
// another adapter's, and go only to the workers that serve it.
func TestAdapterRequestsAreRoutedAndHashedApart(t *testing.T) {
	h := loraHarness(t, "trtllm")
	const prompt = `"messages":[{"role":"user","content":"a prompt long enough for a few blocks: one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}]`
	base, err := h.o.parse(Incoming{Endpoint: 1, Body: []byte(`{"model":"m",` + prompt + `}`)})
	require.NoError(t, err)
	sql, err := h.o.parse(Incoming{Endpoint: 1, Body: []byte(`{"model":"m","lora_request":{"lora_name":"sql","lora_int_id":1},` + prompt + `}`)})
	require.NoError(t, err)
	require.NotEmpty(t, base.Hashes)
	for _, hash := range sql.Hashes {
		require.NotContains(t, base.Hashes, hash)
	}
	for range 4 {
		resp, out := h.run([]byte(`{"model":"m","lora_request":{"lora_name":"sql","lora_int_id":1},`+prompt+`}`), nil)
		require.Equal(t, http.StatusOK, resp.Status, out)
		require.Equal(t, "ctx-1", resp.Route.Ctx)
		require.Equal(t, "gen-1", resp.Route.Gen)
	}
}

// An alias reaches the workers as the model's own name, once the
// orchestrator is told its names are aliases (several models); otherwise
// the body is sent as the client wrote it.
func TestAliasIsSentAsTheModelsName(t *testing.T) {
	cfg := testConfig()
	cfg.Models = []string{"org/model", "short"}
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	body := []byte(`{"model":"short","messages":[{"role":"user","content":"hi"}]}`)
	req, err := h.o.parse(Incoming{Endpoint: 1, Body: body})
	require.NoError(t, err)
	require.JSONEq(t, string(body), string(req.Body), "not aliased: unchanged")
	h.o.aliased = true
	req, err = h.o.parse(Incoming{Endpoint: 1, Body: body})
	require.NoError(t, err)
	require.Equal(t, "short", req.Model)
	require.JSONEq(t, `{"model":"org/model","messages":[{"role":"user","content":"hi"}]}`, string(req.Body))
	require.Equal(t, "org/model", h.o.queueKey(req.Model), "one queue key for every name")
}

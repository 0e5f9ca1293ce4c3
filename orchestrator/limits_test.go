package orchestrator

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/stretchr/testify/require"
)

// Regression (issue 12): max_tokens had no upper bound: prompt + max_tokens
// overflowed in the lease arithmetic, and 9223372036854775800 produced a
// 0-token generation lease. Every limit is now a 400 naming the field and
// the limit, before any worker call, with nothing charged.
func TestContextLengthLimits(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 1000
	cfg.MaxModelLenByModel = []string{"small.v2=50"}
	ctx, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(1, true))
	h := newHarness(t, cfg, []*fakeWorker{ctx}, []*fakeWorker{gen})
	long := strings.Repeat("word ", 1200)
	for _, tc := range []struct {
		name, body, param, says string
	}{
		{"huge max_tokens", `{"model":"m","max_tokens":9223372036854775800,"messages":[{"role":"user","content":"x"}]}`,
			"max_tokens", "max_tokens must be <= max_model_len (1000), got 9223372036854775800"},
		{"max_completion_tokens above the context", `{"model":"m","max_completion_tokens":1001,"messages":[{"role":"user","content":"x"}]}`,
			"max_completion_tokens", "max_completion_tokens must be <= max_model_len (1000), got 1001"},
		{"min_tokens above the context", `{"model":"m","min_tokens":5000,"messages":[{"role":"user","content":"x"}]}`,
			"min_tokens", "min_tokens must be <= max_model_len (1000)"},
		{"prompt longer than the context", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`,
			"messages", "maximum context length is 1000 tokens; the prompt has"},
		{"prompt plus output above the context", `{"model":"m","max_tokens":990,"messages":[{"role":"user","content":"hello there"}]}`,
			"max_tokens", "maximum context length is 1000 tokens; you requested"},
		{"completion prompt longer than the context", `{"model":"m","prompt":"` + long + `"}`,
			"prompt", "maximum context length is 1000 tokens"},
		{"per-model limit", `{"model":"small.v2","max_tokens":51,"messages":[{"role":"user","content":"x"}]}`,
			"max_tokens", "max_tokens must be <= max_model_len (50), got 51"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := protocol.EndpointChat
			if strings.Contains(tc.body, `"prompt"`) {
				endpoint = protocol.EndpointCompletions
			}
			resp := h.o.Handle(t.Context(), Incoming{Endpoint: endpoint, Body: []byte(tc.body), RequestID: "r"})
			require.Equal(t, http.StatusBadRequest, resp.Status, string(resp.Body))
			var e struct {
				Error struct {
					Message string `json:"message"`
					Param   string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(resp.Body, &e))
			require.Equal(t, tc.param, e.Error.Param)
			require.Contains(t, e.Error.Message, tc.says)
		})
	}
	require.Empty(t, ctx.calls())
	require.Empty(t, gen.calls())
	h.requireNoLoad(t)
}

func TestDefaultOutputLimitFitsTheContext(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen, cfg.DefaultMaxTokens = 100, 90
	h := newHarness(t, cfg, nil, nil)
	req, err := h.o.parse(Incoming{Endpoint: 1, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)})
	require.NoError(t, err)
	require.Equal(t, 100-len(req.Tokens), req.MaxTokens, "the default is capped to what the prompt leaves")
}

func TestModelLenConfigNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.MaxModelLen = 0 }, "max_model_len: must be between 1 and 1073741824, got 0"},
		{func(c *Config) { c.DefaultMaxTokens = 200000 }, "default_max_tokens: must be <= max_model_len (131072), got 200000"},
		{func(c *Config) { c.MaxModelLenByModel = []string{"m:100"} }, `max_model_len_by_model[0]: "m:100" is not MODEL=LEN`},
		{func(c *Config) { c.MaxModelLenByModel = []string{"m=0"} }, `max_model_len_by_model[0]: "m=0" is not MODEL=LEN`},
	} {
		cfg := Defaults()
		tc.mutate(&cfg)
		require.ErrorContains(t, cfg.Validate(), tc.want)
	}
	cfg := Defaults()
	cfg.MaxModelLenByModel = []string{"Qwen/Qwen2.5-7B=32768"}
	require.NoError(t, cfg.Validate())
	require.Equal(t, 32768, cfg.ModelLen("Qwen/Qwen2.5-7B"), "a dotted model name")
	require.Equal(t, 131072, cfg.ModelLen("other"))
}

// Regression: the context check used only duet's configured max_model_len
// (default 131072), so a request that did not fit the workers' own context
// length (vLLM's --max-model-len, as /v1/models reports it) reached them.
// The smaller of the two applies, over every available worker of either
// role, and the 400 names the one that did.
func TestContextLengthIsTheWorkersWhenSmaller(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen, cfg.DefaultMaxTokens = 1000, 900
	cfg.MaxModelLenByModel = []string{"small=50"}
	h := newHarness(t, cfg, nil, nil)
	ms := []router.Member{
		{ID: "ctx-0", Role: disagg.RoleContext, Healthy: true, MaxModelLen: 800},
		{ID: "gen-0", Role: disagg.RoleGeneration, Healthy: true, MaxModelLen: 600},
		{ID: "gen-1", Role: disagg.RoleGeneration, Healthy: true}, // reported none
	}
	h.pool.Sync(ms)
	parse := func(body string) (*Request, *Error) {
		req, err := h.o.parse(Incoming{Endpoint: protocol.EndpointChat, Body: []byte(body)})
		var e *Error
		if err != nil {
			require.ErrorAs(t, err, &e)
		}
		return req, e
	}
	for _, tc := range []struct {
		name, body, param, says string
	}{
		{"max_tokens above the workers'", `{"model":"m","max_tokens":700,"messages":[{"role":"user","content":"x"}]}`,
			"max_tokens", "max_tokens must be <= the workers' context length (600), got 700"},
		{"min_tokens above the workers'", `{"model":"m","min_tokens":650,"messages":[{"role":"user","content":"x"}]}`,
			"min_tokens", "min_tokens must be <= the workers' context length (600), got 650"},
		{"prompt plus output above the workers'", `{"model":"m","max_tokens":599,"messages":[{"role":"user","content":"hello there"}]}`,
			"max_tokens", "the workers' context length is 600 tokens; you requested"},
		{"prompt longer than the workers'", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 700) + `"}]}`,
			"messages", "the workers' context length is 600 tokens; the prompt has"},
		{"a configured limit below the workers'", `{"model":"small","max_tokens":51,"messages":[{"role":"user","content":"x"}]}`,
			"max_tokens", "max_tokens must be <= max_model_len (50), got 51"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := parse(tc.body)
			require.NotNil(t, e)
			require.Equal(t, http.StatusBadRequest, e.Status)
			require.Equal(t, tc.param, e.Param)
			require.Contains(t, e.Message, tc.says)
		})
	}
	req, e := parse(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
	require.Nil(t, e)
	require.Equal(t, 600-len(req.Tokens), req.MaxTokens, "the default output is capped to what the workers' context leaves")

	ms[1].Healthy = false // the shortest worker is down: the next one's applies
	h.pool.Sync(ms)
	_, e = parse(`{"model":"m","max_tokens":700,"messages":[{"role":"user","content":"x"}]}`)
	require.Nil(t, e)
	_, e = parse(`{"model":"m","max_tokens":801,"messages":[{"role":"user","content":"x"}]}`)
	require.NotNil(t, e)
	require.Contains(t, e.Message, "the workers' context length (800)")

	ms[0].MaxModelLen = 0 // no available worker reports one: the configured limit
	h.pool.Sync(ms)
	_, e = parse(`{"model":"m","max_tokens":1001,"messages":[{"role":"user","content":"x"}]}`)
	require.NotNil(t, e)
	require.Contains(t, e.Message, "max_tokens must be <= max_model_len (1000), got 1001")
}

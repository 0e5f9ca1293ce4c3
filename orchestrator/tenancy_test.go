package orchestrator

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/duet-serve/duet/orchestrator/queue"
	"github.com/duet-serve/duet/orchestrator/tenant"
	"github.com/stretchr/testify/require"
)

func withTenants(t *testing.T, h *harness, cfg tenant.Config) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	h.o.tenants, h.o.limits = tenant.NewSet(cfg), tenant.NewLimiter(cfg, nil, nil)
}

func tenantConfig(specs ...tenant.Spec) tenant.Config {
	cfg := tenant.Defaults()
	cfg.Tenants = specs
	return cfg
}

func openAIError(t *testing.T, body string) map[string]any {
	t.Helper()
	var e struct {
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error
}

func TestUnknownKeyIsRefused(t *testing.T) {
	ctxW, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctxW}, []*fakeWorker{gen})
	cfg := tenantConfig(tenant.Spec{Name: "acme", APIKeys: []string{"sk-acme-key"}})
	cfg.RequireKey = true
	withTenants(t, h, cfg)
	resp, out := h.run(testChatBody(false, ""), map[string]string{"Authorization": "Bearer sk-wrong-key"})
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	require.Equal(t, "invalid_api_key", openAIError(t, out)["code"])
	require.Empty(t, ctxW.calls(), "no worker called")
	resp, out = h.run(testChatBody(false, ""), map[string]string{"Authorization": "Bearer sk-acme-key"})
	require.Equal(t, http.StatusOK, resp.Status, out)
}

func TestTenantOverItsRateGets429(t *testing.T) {
	ctxW, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctxW}, []*fakeWorker{gen})
	withTenants(t, h, tenantConfig(tenant.Spec{Name: "acme", APIKeys: []string{"sk-acme-key"}, InputTokensPerMinute: 6}))
	auth := map[string]string{"Authorization": "Bearer sk-acme-key"}
	resp, out := h.run(testChatBody(false, ""), auth) // the bucket holds 1 token: one request borrows the rest
	require.Equal(t, http.StatusOK, resp.Status, out)
	resp, out = h.run(testChatBody(false, ""), auth)
	require.Equal(t, http.StatusTooManyRequests, resp.Status)
	require.GreaterOrEqual(t, resp.RetryAfter, time.Second)
	e := openAIError(t, out)
	require.Equal(t, "rate_limit_exceeded", e["code"])
	require.Equal(t, "tokens", e["type"])
	require.Contains(t, e["message"], "Rate limit reached for tenant acme on input_tokens_per_minute: limit 6")
	require.Len(t, ctxW.calls(), 1, "the refused request reached no worker")
	resp, _ = h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status, "a request no tenant claims has no tenant limits")
}

func TestPriorityClassOfARequest(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	qcfg := queue.Defaults()
	qcfg.Enabled = true
	q, err := queue.New(qcfg, h.pool, queue.Options{})
	require.NoError(t, err)
	h.o.queue = q
	high := &tenant.Tenant{Name: "a", Class: "high"}
	low := &tenant.Tenant{Name: "b", Class: "low"}
	plain := &tenant.Tenant{Name: "c"}
	cases := []struct {
		header string
		tenant *tenant.Tenant
		want   string
	}{
		{"", nil, ""},
		{"low", nil, "low"},
		{" high ", nil, "high"},
		{"", high, "high"},
		{"low", high, "low"},      // a tenant may lower its class
		{"high", low, "low"},      // never raise it
		{"normal", low, "low"},    // nor to the middle
		{"high", plain, "normal"}, // a tenant without a class has the default one
		{"low", plain, "low"},
		{"", plain, "normal"},
	}
	for _, c := range cases {
		got, err := h.o.priorityClass(Incoming{Header: func(string) string { return c.header }}, c.tenant)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%q %v", c.header, c.tenant)
	}
	resp, out := h.run(testChatBody(false, ""), map[string]string{HeaderPriority: "urgent"})
	require.Equal(t, http.StatusBadRequest, resp.Status)
	require.Contains(t, out, `X-Duet-Priority: unknown priority class \"urgent\" (valid: high, normal, low)`)
}

// Two tenants never share a session, and an isolated tenant's prompts
// share no block hash with anyone's.
func TestTenantCacheIdentity(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	withTenants(t, h, tenantConfig(tenant.Spec{Name: "open", APIKeys: []string{"sk-open-key"}},
		tenant.Spec{Name: "closed", APIKeys: []string{"sk-closed-key"}, IsolateCache: true}))
	prompt := "a long enough prompt to fill more than one block of tokens: one two three four five six seven eight nine ten " +
		"eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three"
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + prompt + `"}],"conversation_params":{"conversation_id":"c1"}}`)
	parse := func(key string) *Request {
		hdr := map[string]string{"Authorization": "Bearer " + key}
		req, err := h.o.parse(Incoming{Endpoint: 1, Body: body, Header: func(n string) string { return hdr[n] }})
		require.NoError(t, err)
		require.NotEmpty(t, req.Hashes)
		return req
	}
	anonymous, open, closed := parse("none"), parse("sk-open-key"), parse("sk-closed-key")
	require.Equal(t, "c1", anonymous.SessionKey)
	require.Equal(t, "open/c1", open.SessionKey)
	require.Equal(t, "closed/c1", closed.SessionKey)
	require.Equal(t, anonymous.Hashes, open.Hashes, "a tenant without isolate_cache shares cache credit")
	for i := range closed.Hashes {
		require.NotContains(t, open.Hashes, closed.Hashes[i], "block %d", i)
	}
}

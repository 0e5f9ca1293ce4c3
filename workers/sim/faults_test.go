package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

func TestFaultError(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultErrorRate = 1
	w := startWorker(t, cfg)
	r := post(t, w.url+"/v1/chat/completions", chatReq("x", nil))
	require.Equal(t, http.StatusInternalServerError, r.status)
	e := r.errorBody(t)
	require.Equal(t, openai.ErrTypeServer, e.Error.Type)
	require.JSONEq(t, `"injected_fault"`, string(e.Error.Code))
	require.Equal(t, uint64(1), w.s.metrics.faults[faultError].Load())
}

func TestFaultHangUntilClientGivesUp(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultHangRate = 1
	w := startWorker(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(`{"model":"`+Defaults().Model+`","messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	start := time.Now()
	_, err = httpClient.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "no byte came back before the client gave up")
	require.Eventually(t, func() bool { return w.s.hijacked.Load() == 0 }, 5*time.Second, 5*time.Millisecond,
		"the hang ends once the client hangs up")
}

func TestFaultHangIsBounded(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultHangRate = 1
	cfg.FaultHangMax = 100 * time.Millisecond
	w := startWorker(t, cfg)
	_, err := httpClient.Post(w.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"`+Defaults().Model+`","messages":[{"role":"user","content":"x"}]}`))
	require.Error(t, err, "the connection closes without a response")
}

func TestFaultDie(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultDieRate = 1
	cfg.FaultDieAfterTokens = 3
	w := startWorker(t, cfg)

	t.Run("stream stops without DONE", func(t *testing.T) {
		r := post(t, w.url+"/v1/chat/completions", chatReq("die", map[string]any{"max_tokens": 10, "stream": true}))
		require.Equal(t, http.StatusOK, r.status)
		require.True(t, r.closed, "the connection closes")
		events := sseEvents(t, r.body)
		require.Len(t, events, 1+3, "role chunk and three tokens")
		for _, ev := range events {
			require.False(t, openai.IsDone(ev))
			var c openai.ChatChunk
			require.NoError(t, json.Unmarshal(ev, &c))
			require.Nil(t, c.Choices[0].FinishReason)
		}
	})
	t.Run("non-stream gets no response", func(t *testing.T) {
		_, err := httpClient.Post(w.url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+Defaults().Model+`","messages":[{"role":"user","content":"x"}]}`))
		require.Error(t, err)
	})
}

func TestFaultAdmin(t *testing.T) {
	w := startWorker(t, testConfig("mixed", ProtocolTRTLLM))
	body := chatReq(longText("slow", 500), map[string]any{"max_tokens": 1})
	normal := post(t, w.url+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, normal.status)

	r := do(t, http.MethodPost, w.url+"/admin/faults", `{"slow_factor":3,"hang_max":"2s"}`, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var set faultSettings
	require.NoError(t, json.Unmarshal(r.body, &set))
	require.Equal(t, 3.0, set.SlowFactor)
	require.Equal(t, duration(2*time.Second), set.HangMax)
	require.Zero(t, set.ErrorRate, "fields not in the patch keep their value")

	// The same uncached work (a new prompt of equal length) takes 3x.
	slowBody := chatReq(longText("slox", 500), map[string]any{"max_tokens": 1})
	slow := post(t, w.url+"/v1/chat/completions", slowBody)
	require.InDelta(t, 3*modelledUs(t, normal), modelledUs(t, slow), 3)

	require.Equal(t, http.StatusOK, do(t, http.MethodPost, w.url+"/admin/faults", `{"error_rate":1}`, nil).status)
	require.Equal(t, http.StatusInternalServerError, post(t, w.url+"/v1/chat/completions", body).status)

	r = do(t, http.MethodDelete, w.url+"/admin/faults", nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &set))
	require.Equal(t, 1.0, set.SlowFactor)
	require.Zero(t, set.ErrorRate)
	require.Equal(t, http.StatusOK, post(t, w.url+"/v1/chat/completions", body).status)

	r = do(t, http.MethodGet, w.url+"/admin/faults", nil, nil)
	require.JSONEq(t, `{"error_rate":0,"hang_rate":0,"hang_max":"10m0s","die_rate":0,"die_after_tokens":4,"slow_factor":1}`, string(r.body))
}

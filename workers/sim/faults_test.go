package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
	require.JSONEq(t, `{"error_rate":0,"hang_rate":0,"hang_max":"10m0s","die_rate":0,"die_after_tokens":4,"slow_factor":1,"garbage_rate":0,"cut_rate":0,"stall_rate":0,"error_event_rate":0,"kv_pull_fail_rate":0,"kv_events_paused":false}`, string(r.body))
}

func TestFaultGarbage(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultGarbageRate = 1
	cfg.FaultDieAfterTokens = 3
	w := startWorker(t, cfg)

	t.Run("a stream gets one event that is not JSON, then goes on", func(t *testing.T) {
		r := post(t, w.url+"/v1/chat/completions", chatReq("garbage", map[string]any{"max_tokens": 6, "stream": true}))
		require.Equal(t, http.StatusOK, r.status)
		events := sseEvents(t, r.body)
		require.Len(t, events, 1+3+1+3+1+1, "role, three tokens, garbage, three tokens, finish, [DONE]")
		for i, ev := range events {
			switch {
			case i == 4:
				require.False(t, json.Valid(ev), "the garbage event: %s", ev)
			case i == len(events)-1:
				require.True(t, openai.IsDone(ev))
			default:
				require.True(t, json.Valid(ev), "event %d: %s", i, ev)
			}
		}
	})
	t.Run("a non-streaming request gets a 200 that is not JSON", func(t *testing.T) {
		seen := map[string]bool{}
		for i := 0; i < 20 && len(seen) < 2; i++ {
			r := post(t, w.url+"/v1/chat/completions", chatReq("garbage", nil))
			require.Equal(t, http.StatusOK, r.status)
			require.False(t, json.Valid(r.body), "%s", r.body)
			ctype := r.header.Get("Content-Type")
			if strings.HasPrefix(ctype, "text/html") {
				require.Contains(t, string(r.body), "<html>")
			} else {
				require.Equal(t, "application/json", ctype)
				require.True(t, strings.HasPrefix(string(r.body), `{"id":`), "truncated JSON: %s", r.body)
			}
			seen[ctype] = true
		}
		require.Len(t, seen, 2, "both kinds of garbage")
	})
	require.Positive(t, w.s.metrics.faults[faultGarbage].Load())
}

func TestFaultCut(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultCutRate = 1
	cfg.FaultDieAfterTokens = 3
	w := startWorker(t, cfg)

	t.Run("a stream closes in the middle of an event and of its chunk", func(t *testing.T) {
		r, err := doErr(http.MethodPost, w.url+"/v1/chat/completions", chatReq("cut", map[string]any{"max_tokens": 10, "stream": true}), nil)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the chunked body ends mid-chunk")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, openai.ContentTypeSSE, r.header.Get("Content-Type"))
		last := bytes.LastIndex(r.body, []byte("data: "))
		require.Positive(t, last)
		require.Len(t, sseEvents(t, r.body[:last]), 1+3, "role chunk and three tokens")
		cut := string(r.body[last:])
		require.True(t, strings.HasPrefix(cut, `data: {"id":`), "half an event: %q", cut)
		require.NotContains(t, cut, "\n", "the last event is cut")
	})
	t.Run("a non-streaming body closes halfway", func(t *testing.T) {
		r, err := doErr(http.MethodPost, w.url+"/v1/chat/completions", chatReq("cut", nil), nil)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.Equal(t, http.StatusOK, r.status)
		require.False(t, json.Valid(r.body))
	})
	t.Run("a stream shorter than the fault ends cleanly", func(t *testing.T) {
		r := post(t, w.url+"/v1/chat/completions", chatReq("short", map[string]any{"max_tokens": 2, "stream": true}))
		require.Equal(t, http.StatusOK, r.status)
		events := sseEvents(t, r.body)
		require.True(t, openai.IsDone(events[len(events)-1]))
	})
	require.Equal(t, uint64(2), w.s.metrics.faults[faultCut].Load())
}

func TestFaultStall(t *testing.T) {
	cfg := testConfig("mixed", ProtocolTRTLLM)
	cfg.FaultStallRate = 1
	cfg.FaultDieAfterTokens = 3
	w := startWorker(t, cfg)

	t.Run("a stream stops sending until the client leaves", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+Defaults().Model+`","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"x"}]}`))
		require.NoError(t, err)
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		events := make(chan []byte, 100)
		go func() {
			defer close(events)
			r := openai.NewSSEReader(resp.Body, 0)
			for {
				ev, err := r.Next()
				if err != nil {
					return
				}
				events <- append([]byte(nil), ev...)
			}
		}()
		for i := 0; i < 1+3; i++ {
			<-events
		}
		select {
		case ev, ok := <-events:
			require.False(t, ok, "nothing after the stall point: %s", ev)
		case <-time.After(300 * time.Millisecond): // 50 tokens take ~4 ms at this time scale
		}
		require.Equal(t, int64(1), w.s.hijacked.Load(), "the connection is held")
		cancel()
		require.Eventually(t, func() bool { return w.s.hijacked.Load() == 0 }, 5*time.Second, 5*time.Millisecond,
			"the stall ends once the client hangs up")
	})
	t.Run("a non-streaming request gets its headers, then a body that never comes", func(t *testing.T) {
		_, err := w.s.faults.apply(faultPatch{HangMax: openai.Ptr(duration(200 * time.Millisecond))})
		require.NoError(t, err)
		r, err := doErr(http.MethodPost, w.url+"/v1/chat/completions", chatReq("stall", nil), nil)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "hang_max closes the connection")
		require.Equal(t, http.StatusOK, r.status)
		require.Empty(t, r.body)
	})
	require.Equal(t, uint64(2), w.s.metrics.faults[faultStall].Load())
}

// The engine-failure rates in POST /admin/faults: validated like the other
// rates, and drawn for a request only where they apply.
func TestEngineFailureFaultSettings(t *testing.T) {
	w := startWorker(t, testConfig("generation", ProtocolVLLM))
	r := post(t, w.url+"/admin/faults", `{"error_event_rate":1.5}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errorBody(t).Error.Message, "error_event_rate: must be in [0, 1], got 1.5")
	r = post(t, w.url+"/admin/faults", `{"kv_pull_fail_rate":-1}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errorBody(t).Error.Message, "kv_pull_fail_rate: must be in [0, 1], got -1")

	r = post(t, w.url+"/admin/faults", `{"kv_pull_fail_rate":1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"kv_pull_fail_rate":1`)
	require.True(t, w.s.faults.draw(true).kvPullFail)
	require.False(t, w.s.faults.draw(false).kvPullFail, "only a request with a KV handle has a pull to fail")
	require.Equal(t, http.StatusOK, post(t, w.url+"/v1/completions", completionReq("plain", map[string]any{"max_tokens": 2})).status)

	r = post(t, w.url+"/admin/faults", `{"kv_pull_fail_rate":0,"error_event_rate":1,"die_after_tokens":1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = post(t, w.url+"/v1/completions", completionReq("plain", map[string]any{"max_tokens": 2}))
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Equal(t, vllmInternalBody, string(r.body))
	metrics := string(do(t, http.MethodGet, w.url+"/metrics", nil, nil).body)
	require.Contains(t, metrics, `duet_sim_faults_injected_total{model_name="`+w.s.cfg.Model+`",kind="error_event"} 1`)
	require.Contains(t, metrics, `duet_sim_faults_injected_total{model_name="`+w.s.cfg.Model+`",kind="kv_pull_fail"} 0`)
}

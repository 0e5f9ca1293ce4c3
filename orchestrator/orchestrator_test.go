package orchestrator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestStreamRelaysAndPatchesUsage(t *testing.T) {
	ctx := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, genStream(3, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	resp, out := h.run(testChatBody(true, `,"stream_options":{"include_usage":true},"top_k":5,"nvext":{"k":1}`), map[string]string{"X-Correlation-ID": "sess-1"})
	require.Equal(t, http.StatusOK, resp.Status)
	require.Contains(t, out, `" t0"`)
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
	require.Contains(t, out, `"prompt_tokens":30`, "usage reports the context phase's prompt tokens")
	require.Contains(t, out, `"cached_tokens":20`)

	ctxBody := ctx.calls()[0]
	require.JSONEq(t, `false`, string(ctxBody["stream"]))
	var dp map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(ctxBody["disaggregated_params"], &dp))
	require.JSONEq(t, `"context_only"`, string(dp["request_type"]))
	require.JSONEq(t, `"sess-1"`, string(dp["conversation_id"]))
	genBody := gen.calls()[0]
	require.NoError(t, json.Unmarshal(genBody["disaggregated_params"], &dp))
	require.JSONEq(t, `"generation_only"`, string(dp["request_type"]))
	require.Equal(t, "18446744073709551615", string(dp["ctx_request_id"]), "64-bit handle relayed byte for byte")
	require.JSONEq(t, `5`, string(genBody["top_k"]), "client fields duet does not own reach the worker")
	require.NotContains(t, genBody, "nvext", "trtllm-serve rejects the nvext extension (extra_forbidden)")
}

func TestClientInternalFieldsNeverForwarded(t *testing.T) {
	ctx := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, genStream(1, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	evil := `,"disaggregated_params":{"conversation_id":"c9","request_type":"generation_only","ctx_request_id":5,"encoded_opaque_state":"ZXZpbA=="},"kv_transfer_params":{"remote_host":"evil"},"bootstrap_host":"evil","bootstrap_roo\\u006d":7`
	resp, _ := h.run(testChatBody(false, evil), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	for _, w := range []*fakeWorker{ctx, gen} {
		b := w.calls()[0]
		require.NotContains(t, b, "kv_transfer_params")
		require.NotContains(t, b, "bootstrap_host")
		require.NotContains(t, b, "bootstrap_room", "an escaped key is recognised too")
		require.NotContains(t, string(b["disaggregated_params"]), "ZXZpbA==")
		require.Contains(t, string(b["disaggregated_params"]), `"c9"`, "the client's conversation id is kept as the session key")
	}
}

func TestContextFailureRetriedOnAnotherWorker(t *testing.T) {
	bad := newFakeWorker(t, status(500))
	good := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, genStream(2, true))
	h := newHarness(t, testConfig(), []*fakeWorker{bad, good}, []*fakeWorker{gen})
	for i := 0; i < 4; i++ {
		resp, _ := h.run(testChatBody(false, ""), nil)
		require.Equal(t, http.StatusOK, resp.Status)
	}
	ids := map[string]bool{}
	for _, c := range append(bad.calls(), good.calls()...) {
		var dp map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(c["disaggregated_params"], &dp))
		require.False(t, ids[string(dp["disagg_request_id"])], "a retry gets a new disagg_request_id")
		ids[string(dp["disagg_request_id"])] = true
	}
}

func TestFailureClasses(t *testing.T) {
	cases := []struct {
		name       string
		ctx, gen   func(http.ResponseWriter, map[string]json.RawMessage)
		stream     bool
		wantStatus int
		wantInBody string
	}{
		{"ctx 4xx relayed", status(400), genStream(1, true), false, 400, "fake 400"},
		{"ctx 5xx exhausted", status(503), genStream(1, true), false, 502, "context worker answered status 503: fake 503"},
		{"gen 4xx relayed", ctxOK, status(422), true, 422, "fake 422"},
		{"gen 5xx before stream", ctxOK, status(500), true, 502, "generation worker answered status 500: fake 500"},
		{"gen cut before first event", ctxOK, genStream(0, false), true, 502, "generation worker failed"},
		{"bad ctx response", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.Write([]byte(`{"choices":[]}`)) }, genStream(1, true), false, 502, "context worker failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, tc.ctx)}, []*fakeWorker{newFakeWorker(t, tc.gen)})
			resp, out := h.run(testChatBody(tc.stream, ""), nil)
			require.Equal(t, tc.wantStatus, resp.Status, out)
			require.Contains(t, out, tc.wantInBody)
			require.Contains(t, out, `"error"`)
		})
	}
}

func TestStreamCutMidwayIsAnErrorEvent(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(3, false))})
	resp, out := h.run(testChatBody(true, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status, "headers were already sent")
	require.Contains(t, out, `" t2"`)
	require.Contains(t, out, `data: {"error":{"message":"generation worker ended the stream without [DONE] or a finish_reason"`)
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
}

func TestContextFinishedKeepsContent(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := newFakeWorker(t, genStream(1, true))
		h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxFinished)}, []*fakeWorker{gen})
		extra := ""
		if stream {
			extra = `,"stream_options":{"include_usage":true}`
		}
		resp, out := h.run(testChatBody(stream, extra), nil)
		require.Equal(t, http.StatusOK, resp.Status)
		require.Contains(t, out, `Bye`)
		require.Contains(t, out, `"finish_reason":"stop"`)
		require.Contains(t, out, `"prompt_tokens":30`)
		require.Empty(t, gen.calls(), "no generation phase")
		if stream {
			require.Contains(t, out, `"object":"chat.completion.chunk"`)
			require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
		}
	}
}

func TestConditionalDisaggSkipsContextPhase(t *testing.T) {
	cfg := testConfig()
	cfg.MaxLocalPrefillTokens = 1000
	ctx := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, genStream(1, true))
	h := newHarness(t, cfg, []*fakeWorker{ctx}, []*fakeWorker{gen})
	resp, _ := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Empty(t, ctx.calls())
	require.NotContains(t, gen.calls()[0], "disaggregated_params")
}

func TestBadInputMakesNoUpstreamCall(t *testing.T) {
	cfg := testConfig()
	cfg.Models = []string{"m"}
	ctx := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, genStream(1, true))
	h := newHarness(t, cfg, []*fakeWorker{ctx}, []*fakeWorker{gen})
	cases := []struct {
		name, body string
		status     int
		param      string
	}{
		{"malformed", `{"model":`, 400, ""},
		{"not an object", `[1]`, 400, ""},
		{"wrong type", `{"model":"m","messages":"hi"}`, 400, "messages"},
		{"missing messages", `{"model":"m"}`, 400, "messages"},
		{"empty messages", `{"model":"m","messages":[]}`, 400, "messages"},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role"},
		{"missing model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"unknown model", `{"model":"zz","messages":[{"role":"user","content":"x"}]}`, 404, "model"},
		{"n > 1", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "n"},
		{"zero max_tokens", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens"},
		{"negative max_completion_tokens", `{"model":"m","max_completion_tokens":-3,"messages":[{"role":"user","content":"x"}]}`, 400, "max_completion_tokens"},
		{"bad session id", `{"model":"m","conversation_params":{"conversation_id":"has space"},"messages":[{"role":"user","content":"x"}]}`, 400, "conversation_params.conversation_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := h.run([]byte(tc.body), nil)
			require.Equal(t, tc.status, resp.Status, out)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &e))
			require.NotEmpty(t, e.Error.Message)
			if tc.param != "" {
				require.NotNil(t, e.Error.Param)
				require.Equal(t, tc.param, *e.Error.Param)
			}
		})
	}
	require.Empty(t, ctx.calls())
	require.Empty(t, gen.calls())
}

// A body that is not JSON gets a message a client can act on, not the
// decoder's.
func TestMalformedBodySaysSo(t *testing.T) {
	h := newHarness(t, testConfig(), nil, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	for body, want := range map[string]string{
		`{"model":`:       "the request body is not valid JSON: unexpected end of JSON input (at byte 9)",
		`{"model": nope}`: "the request body is not valid JSON: invalid character 'o' in literal null (expecting 'u') (at byte 12)",
	} {
		resp, out := h.run([]byte(body), nil)
		require.Equal(t, http.StatusBadRequest, resp.Status)
		var e struct {
			Error struct{ Message, Type string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &e))
		require.Equal(t, want, e.Error.Message, body)
		require.Equal(t, "invalid_request_error", e.Error.Type)
	}
}

func TestNoWorkerIs503(t *testing.T) {
	h := newHarness(t, testConfig(), nil, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	resp, out := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	require.Contains(t, out, "context phase")
}

func TestClientGoneReleasesEverything(t *testing.T) {
	gen := newFakeWorker(t, func(w http.ResponseWriter, body map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 1000; i++ {
			if _, err := w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	})
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	resp := h.o.Handle(context.Background(), Incoming{Endpoint: 1, Body: testChatBody(true, ""), RequestID: "r", Received: time.Now()})
	require.True(t, resp.Streaming())
	done := make(chan struct{})
	go func() { resp.Relay(bufio.NewWriterSize(&failingWriter{n: 300}, 64)); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not notice the gone client")
	}
	h.requireNoLoad(t)
}

func TestIdleStreamTimesOut(t *testing.T) {
	cfg := testConfig()
	cfg.StreamIdleTimeout = 150 * time.Millisecond
	cfg.PingInterval = 20 * time.Millisecond
	gen := newFakeWorker(t, func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n"))
		w.(http.Flusher).Flush()
		time.Sleep(time.Second)
	})
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	_, out := h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, ": ping", "silences are filled with keep-alive comments")
	require.Contains(t, out, "generation stream idle timeout")
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
}

// slowStream sends a content event every gap, n of them, then the end of
// the stream, or stops after the n events without one when complete is
// false (and holds the connection until the request goes).
func slowStream(n int, gap time.Duration, complete bool) func(http.ResponseWriter, map[string]json.RawMessage) {
	return func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for range n {
			w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n"))
			fl.Flush()
			time.Sleep(gap)
		}
		if complete {
			w.Write([]byte("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"))
		}
	}
}

// TestStreamLongerThanTheIdleLimitIsNotIdle: events keep a stream alive
// however long it runs in all (the idle limit is re-armed from the last
// event, not from the start).
func TestStreamLongerThanTheIdleLimitIsNotIdle(t *testing.T) {
	cfg := testConfig()
	cfg.StreamIdleTimeout = 300 * time.Millisecond
	gen := newFakeWorker(t, slowStream(12, 50*time.Millisecond, true)) // 600 ms in all
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	_, out := h.run(testChatBody(true, ""), nil)
	require.NotContains(t, out, "timeout", out)
	require.Equal(t, 12, strings.Count(out, `"content":"x"`), out)
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
}

func TestStreamOverItsTotalLimitEnds(t *testing.T) {
	cfg := testConfig()
	cfg.StreamTotalTimeout = 300 * time.Millisecond
	gen := newFakeWorker(t, slowStream(100, 20*time.Millisecond, true)) // 2 s in all
	h := newHarness(t, cfg, []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	_, out := h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, `"content":"x"`)
	require.Contains(t, out, "generation stream total timeout")
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
	h.requireNoLoad(t)
}

// TestStreamConnectionIsReused pins a connection leak found in issue 13:
// the relay stopped reading at [DONE], before the end of the chunked body,
// so the gen worker's connection was closed and every stream dialled a new
// one. The body is now read to its end and the connection pooled.
func TestStreamConnectionIsReused(t *testing.T) {
	stream := genStream(3, true)
	gen := newFakeWorker(t, func(w http.ResponseWriter, body map[string]json.RawMessage) {
		stream(w, body)
		w.(http.Flusher).Flush()
		time.Sleep(10 * time.Millisecond) // the body ends a little after [DONE]
	})
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	h.o.drainWait = time.Minute // a hang detector, not a timing
	for range 4 {
		_, out := h.run(testChatBody(true, ""), nil)
		require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"), out)
	}
	require.Len(t, gen.calls(), 4)
	require.Equal(t, 1, gen.connections(), "each stream took a new connection")
	h.requireNoLoad(t)
}

// panicWriter panics on the first write: a bug in the relay path.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("boom") }

func TestPanicInRelayReleasesEverything(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genStream(3, true))})
	resp := h.o.Handle(context.Background(), Incoming{Endpoint: 1, Body: testChatBody(true, ""), RequestID: "r", Received: time.Now()})
	require.True(t, resp.Streaming())
	require.NotPanics(t, func() { resp.Relay(bufio.NewWriterSize(panicWriter{}, 16)) })
	h.requireNoLoad(t)
}

// flaky answers with first for the first call, then with rest.
func flaky(first, rest func(http.ResponseWriter, map[string]json.RawMessage)) func(http.ResponseWriter, map[string]json.RawMessage) {
	var mu sync.Mutex
	calls := 0
	return func(w http.ResponseWriter, b map[string]json.RawMessage) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			first(w, b)
			return
		}
		rest(w, b)
	}
}

func TestGenRejectingTheHandleIsRetriedWithAFreshContextPhase(t *testing.T) {
	ctx := newFakeWorker(t, ctxOK)
	gen := newFakeWorker(t, flaky(status(400), genStream(2, true))) // e.g. an expired handle
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	resp, out := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status, out)
	require.Len(t, ctx.calls(), 2, "the retry redoes the context phase")
}

func TestWorkerErrorEventMidStreamIsAFailure(t *testing.T) {
	gen := newFakeWorker(t, func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n")
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine fell over\",\"type\":\"server_error\"}}\n\n")
	})
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{gen})
	_, out := h.run(testChatBody(true, ""), nil)
	require.Contains(t, out, "engine fell over")
	require.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"))
	require.Equal(t, 1.0, testutil.ToFloat64(h.o.metrics.requests.WithLabelValues("chat", "502")), "recorded as a failure, not a 200")
}

func TestDoneBeforeContentIsRetried(t *testing.T) {
	doneFirst := func(w http.ResponseWriter, _ map[string]json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)},
		[]*fakeWorker{newFakeWorker(t, doneFirst), newFakeWorker(t, genStream(2, true))})
	resp, out := h.run(testChatBody(true, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, 1, strings.Count(out, "[DONE]"))
	require.Contains(t, out, `" t1"`)
}

func TestSaturatedWorkersAre503WithRetryAfter(t *testing.T) {
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, status(429))}, []*fakeWorker{newFakeWorker(t, genStream(1, true))})
	resp, _ := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	require.Equal(t, time.Second, resp.RetryAfter)
}

// Regression (issue 11): after a gen worker was killed, every request first
// tried it, then redid the whole request, prefill included (12 prefills for
// 6 requests), until the periodic health check noticed. Passive health
// ejects it at the first connection refused.
func TestDeadGenWorkerIsEjectedAtItsFirstFailure(t *testing.T) {
	ctx := newFakeWorker(t, ctxOK)
	dead, live := newFakeWorker(t, genStream(2, true)), newFakeWorker(t, genStream(2, true))
	dead.srv.Close() // connection refused from now on
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{dead, live})
	for i := 0; i < 6; i++ {
		resp, out := h.run(testChatBody(false, ""), nil)
		require.Equal(t, http.StatusOK, resp.Status, out)
	}
	require.Len(t, ctx.calls(), 6, "the handle went to the live gen worker: no prefill was redone")
	require.Len(t, live.calls(), 6)
	require.Equal(t, int64(1), h.pool.Get("gen-0").Ejections())
}

// Regression (conformance suite): stream_options without stream and
// min_tokens above the output limit were hidden from the context leg (which
// drops those keys) and refused only by the gen worker, after three context
// phases. Every engine rejects them: duet answers 400 before any call.
func TestRequestsEveryEngineRejectsNeverReachAWorker(t *testing.T) {
	ctx, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, genStream(1, true))
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	for extra, param := range map[string]string{
		`,"stream_options":{"include_usage":true}`:  "stream_options",
		`,"max_tokens":4,"min_tokens":8`:            "min_tokens",
		`,"max_completion_tokens":4,"min_tokens":8`: "min_tokens",
	} {
		resp, out := h.run(testChatBody(false, extra), nil)
		require.Equal(t, http.StatusBadRequest, resp.Status, extra)
		require.Contains(t, out, `"param":"`+param+`"`, extra)
	}
	require.Empty(t, ctx.calls())
	resp, _ := h.run(testChatBody(false, `,"stream_options":null,"max_tokens":8,"min_tokens":8`), nil)
	require.Equal(t, http.StatusOK, resp.Status, "null stream_options and min_tokens equal to the limit are fine")
}

// A gen worker that refuses what the ctx worker accepted gets one fresh
// context phase (the handle may have been spent), not one per retry.
func TestGenRefusalIsRetriedOnce(t *testing.T) {
	ctx, gen := newFakeWorker(t, ctxOK), newFakeWorker(t, status(400))
	h := newHarness(t, testConfig(), []*fakeWorker{ctx}, []*fakeWorker{gen})
	resp, out := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusBadRequest, resp.Status)
	require.Contains(t, out, "fake 400")
	require.Len(t, ctx.calls(), 2)
	require.Len(t, gen.calls(), 2)
}

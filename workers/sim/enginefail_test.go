package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/proto/openai"
)

// The engine-failure faults (enginefail.go), checked byte for byte against
// what each engine writes.

// Wire shapes of an internal error, per protocol.
const (
	vllmInternalEvent = `{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`
	vllmInternalBody  = `{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}`
	sglInternalEvent  = `{"error": {"object": "error", "message": "injected fault: internal error in the engine", "type": "INTERNAL_SERVER_ERROR", "param": null, "code": 500}}`
	sglInternalBody   = `{"object":"error","message":"injected fault: internal error in the engine","type":"500","param":null,"code":500}`
	trtInternalBody   = `{"object":"error","message":"injected fault: internal error in the engine","type":"BadRequestError","param":null,"code":400}`
	trtKVPullBody     = `{"object":"error","message":"Error in kv cache transfer for generation requests","type":"BadRequestError","param":null,"code":400}`
)

// failedStream is what a stream that failed inside the engine holds: the
// content events (role chunk and tokens) and the tail after them.
type failedStream struct {
	role   bool     // a role chunk comes first
	tokens int      // token events after it
	tail   []string // raw events after the tokens (error event, [DONE]); none: cut
}

// requireFailedStream checks r against want.
func requireFailedStream(t *testing.T, r httpResult, want failedStream) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, openai.ContentTypeSSE, r.header.Get("Content-Type"))
	evs := sseEvents(t, r.body)
	head := want.tokens
	if want.role {
		head++
	}
	require.Len(t, evs, head+len(want.tail), "body: %s", r.body)
	for i, ev := range evs[:head] {
		var c openai.ChatChunk
		require.NoError(t, json.Unmarshal(ev, &c), "event %d: %s", i, ev)
		require.Len(t, c.Choices, 1)
		require.Nil(t, c.Choices[0].FinishReason, "no finish reason before the failure")
		if i == 0 && want.role {
			require.Equal(t, "assistant", c.Choices[0].Delta.Role)
		}
	}
	for i, raw := range want.tail {
		require.Equal(t, raw, string(evs[head+i]))
	}
	if len(want.tail) == 0 {
		require.True(t, r.closed, "the stream is cut: the connection closes")
	}
}

func TestFaultErrorEvent(t *testing.T) {
	done := "[DONE]"
	tests := []struct {
		protocol   string
		dieAfter   int
		stream     failedStream
		status     int    // non-streaming
		body       string // non-streaming
		completion failedStream
	}{
		{ProtocolVLLM, 3, failedStream{true, 3, []string{vllmInternalEvent, done}}, 500, vllmInternalBody,
			failedStream{false, 3, []string{vllmInternalEvent, done}}},
		{ProtocolVLLM, 0, failedStream{true, 0, []string{vllmInternalEvent, done}}, 500, vllmInternalBody,
			failedStream{false, 0, []string{vllmInternalEvent, done}}},
		{ProtocolSGLang, 3, failedStream{true, 3, []string{sglInternalEvent, done}}, 500, sglInternalBody,
			failedStream{false, 3, []string{sglInternalEvent, done}}},
		{ProtocolSGLang, 0, failedStream{false, 0, []string{sglInternalEvent, done}}, 500, sglInternalBody,
			failedStream{false, 0, []string{sglInternalEvent, done}}},
		{ProtocolTRTLLM, 3, failedStream{true, 3, nil}, 400, trtInternalBody, failedStream{false, 3, nil}},
		{ProtocolTRTLLM, 0, failedStream{false, 0, nil}, 400, trtInternalBody, failedStream{false, 0, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.protocol+"/after="+strconv.Itoa(tt.dieAfter), func(t *testing.T) {
			cfg := testConfig("mixed", tt.protocol)
			cfg.FaultErrorEventRate, cfg.FaultDieAfterTokens = 1, tt.dieAfter
			w := startWorker(t, cfg)
			opts := map[string]any{"max_tokens": 10, "stream": true, "stream_options": map[string]any{"include_usage": true}}

			requireFailedStream(t, post(t, w.url+"/v1/chat/completions", chatReq("fail", opts)), tt.stream)
			requireFailedStream(t, post(t, w.url+"/v1/completions", completionReq("fail", opts)), tt.completion)

			r := post(t, w.url+"/v1/chat/completions", chatReq("fail", map[string]any{"max_tokens": 10}))
			require.Equal(t, tt.status, r.status)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.Equal(t, tt.body, string(r.body))

			require.Equal(t, uint64(3), w.s.metrics.faults[faultErrorEvent].Load())
			require.Equal(t, uint64(3), w.s.metrics.requests[phaseAggregated][outcomeServerError].Load())
		})
	}
}

// A context leg fails at once, in the engine's error shape; an SGLang
// prefill that streams gets the error event.
func TestFaultErrorEventContextLeg(t *testing.T) {
	tests := []struct {
		name, protocol string
		body           map[string]any
		status         int
		want           string // body, or for SGLang's stream the error event
	}{
		{"trtllm context_only", ProtocolTRTLLM, ctxBody(chatReq("ctx", nil)), 400, trtInternalBody},
		{"vllm prefill", ProtocolVLLM, chatReq("ctx", map[string]any{"kv_transfer_params": map[string]any{"do_remote_decode": true}}), 500, vllmInternalBody},
		{"sglang prefill", ProtocolSGLang, withBootstrap(chatReq("ctx", nil), nil, 7), 500, sglInternalBody},
		{"sglang streaming prefill", ProtocolSGLang, withBootstrap(chatReq("ctx", map[string]any{"stream": true}), nil, 8), 200, sglInternalEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("context", tt.protocol)
			cfg.FaultErrorEventRate = 1
			w := startWorker(t, cfg)
			r := post(t, w.url+"/v1/chat/completions", tt.body)
			require.Equal(t, tt.status, r.status, "body: %s", r.body)
			if tt.status == http.StatusOK {
				requireFailedStream(t, r, failedStream{tail: []string{tt.want, "[DONE]"}})
			} else {
				require.Equal(t, tt.want, string(r.body))
			}
			require.Zero(t, w.s.sched.stats().Pins, "nothing was pinned")
			require.Equal(t, uint64(1), w.s.metrics.faults[faultErrorEvent].Load())
		})
	}
}

// vllmPrefill runs the prefill leg of client on w and returns its
// kv_transfer_params, the decode's handle.
func vllmPrefill(t *testing.T, w *testWorker, client map[string]any) json.RawMessage {
	t.Helper()
	prefill := map[string]any{}
	for k, v := range client {
		prefill[k] = v
	}
	prefill["kv_transfer_params"] = map[string]any{"do_remote_decode": true}
	prefill["stream"], prefill["max_tokens"] = false, 1
	delete(prefill, "stream_options")
	return decodeChat(t, post(t, w.url+"/v1/chat/completions", prefill)).KVTransferParams
}

// requireNothingPulled checks that a failed pull left the context worker's
// pin in place, then drops it as its timeout would.
func requireNothingPulled(t *testing.T, ctxW, genW *testWorker) {
	t.Helper()
	require.Equal(t, 1, ctxW.s.sched.stats().Pins, "the context worker keeps its pin")
	require.Zero(t, ctxW.s.metrics.pulls.Load(), "nothing was pulled")
	require.Zero(t, genW.s.metrics.transferTokens.Load(), "no KV arrived")
	require.Equal(t, 1, ctxW.s.sched.expirePins(time.Now().Add(time.Hour)))
}

func TestFaultKVPullFailTRTLLM(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolTRTLLM))
	cfg := testConfig("generation", ProtocolTRTLLM)
	cfg.FaultKVPullFailRate = 1
	genW := startWorker(t, cfg)
	for _, stream := range []bool{true, false} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			client := chatReq("pull fails", map[string]any{"max_tokens": 5, "stream": stream})
			leg := parseCtx(t, post(t, ctxW.url+"/v1/chat/completions", ctxBody(client)))
			r := post(t, genW.url+"/v1/chat/completions", genBody(t, kindChat, client, leg))
			if stream {
				requireFailedStream(t, r, failedStream{}) // cut before any event
			} else {
				require.Equal(t, http.StatusBadRequest, r.status)
				require.Equal(t, trtKVPullBody, string(r.body))
			}
			requireNothingPulled(t, ctxW, genW)
		})
	}
	require.Equal(t, uint64(2), genW.s.metrics.faults[faultKVPullFail].Load())
	plain := post(t, genW.url+"/v1/chat/completions", chatReq("no handle", map[string]any{"max_tokens": 2}))
	require.Equal(t, http.StatusOK, plain.status, "a request without a KV handle has nothing to pull: body %s", plain.body)
}

func TestFaultKVPullFailVLLM(t *testing.T) {
	ctxW := startWorker(t, testConfig("context", ProtocolVLLM))
	cfg := testConfig("generation", ProtocolVLLM)
	cfg.FaultKVPullFailRate = 1
	genW := startWorker(t, cfg)
	tests := []struct {
		name   string
		path   string
		client map[string]any
		role   bool
	}{
		{"chat stream", "/v1/chat/completions", chatReq("pull fails", map[string]any{"max_tokens": 5, "stream": true}), true},
		{"completion stream", "/v1/completions", completionReq("pull fails", map[string]any{"max_tokens": 5, "stream": true}), false},
		{"chat", "/v1/chat/completions", chatReq("pull fails", map[string]any{"max_tokens": 5}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := vllmPrefill(t, ctxW, chatReq("pull fails", nil))
			decode := map[string]any{"kv_transfer_params": kv}
			for k, v := range tt.client {
				decode[k] = v
			}
			r := post(t, genW.url+tt.path, decode)
			if tt.client["stream"] == true {
				requireFailedStream(t, r, failedStream{role: tt.role, tail: []string{vllmInternalEvent, "[DONE]"}})
			} else {
				require.Equal(t, http.StatusInternalServerError, r.status)
				require.Equal(t, vllmInternalBody, string(r.body))
			}
			requireNothingPulled(t, ctxW, genW)
		})
	}
}

func TestFaultKVPullFailSGLang(t *testing.T) {
	preCfg := testConfig("context", ProtocolSGLang)
	preCfg.KVTransferTimeout = 200 * time.Millisecond
	pre := startWorker(t, preCfg)
	cfg := testConfig("generation", ProtocolSGLang)
	cfg.FaultKVPullFailRate = 1
	dec := startWorker(t, cfg)
	for i, stream := range []bool{true, false} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			room := uint64(900 + i)
			body := withBootstrap(chatReq("pull fails", map[string]any{"max_tokens": 5, "stream": stream}), bootPort(t, pre), room)
			preCh := sendAsync(pre.url+"/v1/chat/completions", body)
			require.Eventually(t, func() bool { return pre.s.sched.stats().Pins == 1 }, 5*time.Second, time.Millisecond)
			d := post(t, dec.url+"/v1/chat/completions", body)
			e := requireTransferFailed(t, d, stream, room)
			require.Contains(t, e.Message, "Decode transfer failed for request rank=0")
			require.Contains(t, e.Message, "): injected fault: KV transfer failed")

			// The room is never taken: the prefill times out as for a decode that never came.
			p := await(t, preCh)
			if stream {
				e = sglangStreamErr(t, p)
			} else {
				e = sglangErr(t, p)
			}
			require.Contains(t, e.Message, "in KVPoll.Bootstrapping")
			require.Zero(t, pre.s.metrics.pulls.Load())
			require.Zero(t, dec.s.metrics.transferTokens.Load())
		})
	}
}

// TestPyDumps pins the separators of Python's json.dumps, also inside
// nested values, and that strings are left alone.
func TestPyDumps(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":1,"b":[1,2]}`, `{"a": 1, "b": [1, 2]}`},
		{`{"m":"x: y, z","q":"\"a,b\":"}`, `{"m": "x: y, z", "q": "\"a,b\":"}`},
		{`{"e":"back\\","f":null}`, `{"e": "back\\", "f": null}`},
		{`[]`, `[]`},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, string(pyDumps([]byte(tt.in))))
	}
}

// requireTransferFailed checks an SGLang decode's answer to a failed KV
// transfer for room: an error event without a role chunk (the error comes
// before any output) when streaming, a 500 otherwise, and returns the
// error.
func requireTransferFailed(t *testing.T, d httpResult, stream bool, room uint64) flatError {
	t.Helper()
	var e flatError
	if stream {
		e = sglangStreamErr(t, d)
		require.Equal(t, "INTERNAL_SERVER_ERROR", e.Type)
	} else {
		require.Equal(t, http.StatusInternalServerError, d.status)
		e = sglangErr(t, d)
		require.Equal(t, "500", e.Type)
	}
	require.Equal(t, 500, e.Code)
	require.Contains(t, e.Message, "Decode transfer failed")
	require.Contains(t, e.Message, "KVTransferError(bootstrap_room="+strconv.FormatUint(room, 10)+")")
	return e
}

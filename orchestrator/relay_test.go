package orchestrator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// genEvents streams the given event payloads (each as one data: line) to a
// streaming request, and answers a non-streaming one with body.
func genEvents(body string, events ...string) func(http.ResponseWriter, map[string]json.RawMessage) {
	return func(w http.ResponseWriter, req map[string]json.RawMessage) {
		if string(req["stream"]) != "true" {
			fmt.Fprint(w, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}
}

const (
	okChunk    = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`
	stopChunk  = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	abortChunk = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}`
	okBody     = `{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`
)

// sseEvents returns the data payloads of a relayed stream.
func sseEvents(out string) []string {
	var events []string
	for _, line := range strings.Split(out, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			events = append(events, data)
		}
	}
	return events
}

// Regression (issue 10 review): a first event that is not JSON or that
// ends with a failure reason was relayed as a 200 with an error event; a
// worker that fails before anything was streamed must be retried.
func TestBadFirstEventIsRetriedOnAnotherGenWorker(t *testing.T) {
	for name, bad := range map[string]string{
		"failure finish reason": abortChunk,
		"not JSON":              `hello`,
		"vLLM flat error":       `{"object":"error","message":"kv load failed","type":"InternalServerError","code":500}`,
	} {
		t.Run(name, func(t *testing.T) {
			badGen := newFakeWorker(t, genEvents("", bad, "[DONE]"))
			goodGen := newFakeWorker(t, genEvents("", okChunk, stopChunk, "[DONE]"))
			h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK), newFakeWorker(t, ctxOK)}, []*fakeWorker{badGen, goodGen})
			for i := 0; i < 2; i++ { // round-robin: one of the two requests meets the bad worker first
				resp, out := h.run(testChatBody(true, ""), nil)
				require.Equal(t, http.StatusOK, resp.Status, out)
				events := sseEvents(out)
				require.Equal(t, []string{okChunk, stopChunk, "[DONE]"}, events)
			}
			require.NotEmpty(t, badGen.calls())
		})
	}
}

func TestBrokenStreamAfterContentEndsWithAnErrorEvent(t *testing.T) {
	for name, tc := range map[string]struct{ bad, want string }{
		"failure finish reason": {abortChunk, `gave up on the request (finish_reason \"abort\")`},
		"not JSON":              {`{"choices":[`, "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genEvents("", okChunk, tc.bad, "[DONE]"))})
			_, out := h.run(testChatBody(true, ""), nil)
			events := sseEvents(out)
			require.Len(t, events, 3, out)
			require.Equal(t, okChunk, events[0])
			require.Contains(t, events[1], `{"error":{"message":`)
			require.Contains(t, events[1], tc.want)
			require.Equal(t, "[DONE]", events[2])
		})
	}
}

// A worker's error event after content reaches the client in OpenAI's
// shape with the worker's message and integer code, then [DONE].
func TestMidStreamErrorEventRelayedInOpenAIShape(t *testing.T) {
	flat := `{"object": "error", "message": "engine dead", "type": "InternalServerError", "param": null, "code": 500}`
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genEvents("", okChunk, flat, "[DONE]"))})
	_, out := h.run(testChatBody(true, ""), nil)
	events := sseEvents(out)
	require.Len(t, events, 3, out)
	require.JSONEq(t, `{"error":{"message":"engine dead","type":"InternalServerError","param":null,"code":500}}`, events[1])
	require.Equal(t, "[DONE]", events[2])
}

// Regression (issue 10): a worker writing JSON with a space after each
// colon made a complete stream end in a 502 error event, with usage not
// patched.
func TestSpacedJSONStreamCompletesWithUsagePatched(t *testing.T) {
	spaced := []string{
		`{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}]}`,
		`{"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}`,
		`{"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}`,
		"[DONE]",
	}
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genEvents("", spaced...))})
	resp, out := h.run(testChatBody(true, `,"stream_options":{"include_usage":true}`), nil)
	require.Equal(t, http.StatusOK, resp.Status)
	events := sseEvents(out)
	require.Len(t, events, 4, out)
	require.JSONEq(t, `{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":20}}}`, events[2])
	require.Equal(t, "[DONE]", events[3])
}

// Regression (issue 10 review): rewriting the usage re-encoded strings
// fastjson had unescaped while reading them, in Go's quoting: control
// characters reached the client as invalid JSON.
func TestUsageRewriteKeepsStringsValidJSON(t *testing.T) {
	body := `{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a\u0007b\"c\u001b\u007f\ud83d\ude00 \u2028"},"finish_reason":"remote_decode"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`
	h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK)}, []*fakeWorker{newFakeWorker(t, genEvents(body))})
	resp, out := h.run(testChatBody(false, ""), nil)
	require.Equal(t, http.StatusOK, resp.Status, out)
	require.True(t, json.Valid([]byte(out)), out)
	var r struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "a\u0007b\"c\u001b\u007f\U0001F600 \u2028", r.Choices[0].Message.Content)
	require.Equal(t, "stop", r.Choices[0].FinishReason, "a finish reason OpenAI does not define becomes stop")
	require.Equal(t, 30, r.Usage.PromptTokens)
}

// A whole response that is not a usable answer is a gen worker failure:
// retried on another gen worker.
func TestBadCompleteResponseIsRetried(t *testing.T) {
	for name, bad := range map[string]string{
		"error object in a 200": `{"object":"error","message":"boom","type":"InternalServerError","code":500}`,
		"failure finish reason": strings.Replace(okBody, `"length"`, `"abort"`, 1),
		"null body":             `null`,
	} {
		t.Run(name, func(t *testing.T) {
			badGen, goodGen := newFakeWorker(t, genEvents(bad)), newFakeWorker(t, genEvents(okBody))
			h := newHarness(t, testConfig(), []*fakeWorker{newFakeWorker(t, ctxOK), newFakeWorker(t, ctxOK)}, []*fakeWorker{badGen, goodGen})
			for i := 0; i < 2; i++ {
				resp, out := h.run(testChatBody(false, ""), nil)
				require.Equal(t, http.StatusOK, resp.Status, out)
				require.Contains(t, out, `"content":"hello"`)
			}
			require.NotEmpty(t, badGen.calls())
		})
	}
}

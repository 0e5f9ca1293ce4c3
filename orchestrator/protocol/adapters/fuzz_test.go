package adapters

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/internal/allocs"
	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
	"github.com/duet-serve/duet/orchestrator/protocol/trtllm"
	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// fuzzInput is a valid attempt: what the orchestrator would pass.
func fuzzInput(ep protocol.Endpoint, body []byte) protocol.Input {
	return protocol.Input{Endpoint: ep, Body: body, RequestID: protocol.MinRequestID + 7, ConversationID: "conv-1",
		CtxWorker: protocol.WorkerAddr{Host: "10.0.0.5", BootstrapPort: 8998}, Room: 12345}
}

// endpointOf picks chat or completions from a fuzzed byte.
func endpointOf(b uint8) protocol.Endpoint {
	if b%2 == 0 {
		return protocol.EndpointChat
	}
	return protocol.EndpointCompletions
}

// addFiles adds every file of the adapters' testdata/<dir> as a seed, once
// per endpoint: real engine bodies, and the broken ones the golden tests
// already reject.
func addFiles(f *testing.F, dir string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "*", "testdata", dir, "*"))
	require.NoError(f, err)
	require.NotEmpty(f, paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
	}
}

// FuzzTRTLLMContextResponse feeds TensorRT-LLM's ParseContextResponse
// arbitrary ctx worker bodies; see checkContextResponse.
func FuzzTRTLLMContextResponse(f *testing.F) { fuzzContextResponse(f, trtllm.New()) }

// FuzzVLLMContextResponse is FuzzTRTLLMContextResponse for vLLM.
func FuzzVLLMContextResponse(f *testing.F) { fuzzContextResponse(f, vllm.New()) }

// FuzzSGLangContextResponse is FuzzTRTLLMContextResponse for SGLang, whose
// prefill answer is only drained.
func FuzzSGLangContextResponse(f *testing.F) { fuzzContextResponse(f, sglang.New()) }

func fuzzContextResponse(f *testing.F, a protocol.Adapter) {
	addFiles(f, "responses")
	f.Fuzz(func(t *testing.T, body []byte, ep uint8) {
		checkContextResponse(t, a, fuzzInput(endpointOf(ep), []byte(`{"model":"m","messages":[],"prompt":"p"}`)), body)
	})
}

// checkContextResponse checks ParseContextResponse's contract on one body:
// it does not modify body, and the result does not alias it; a rejection
// is a *protocol.ContextResponseError naming the adapter; an accepted body
// is a JSON object whose finish reason is not a failure, the raw fields
// are what the Context says they are, Finished agrees with the finish
// reason, and a Context that is not Finished gives a valid generation
// request carrying its handle. Work is linear in the body.
func checkContextResponse(t *testing.T, a protocol.Adapter, in protocol.Input, body []byte) {
	orig := bytes.Clone(body)
	var ctx protocol.Context
	var err error
	allocated := allocs.By(len(body), func() { ctx, err = a.ParseContextResponse(in, body) })
	require.Equal(t, orig, body, "the adapter modified the body")
	require.LessOrEqual(t, allocated, uint64(16*len(body)+64<<10), "allocated %d bytes for a %d-byte body", allocated, len(body))
	if a.Concurrent() {
		require.NoError(t, err)
		require.Equal(t, protocol.Context{}, ctx, "a concurrent adapter reads nothing")
		return
	}
	if err != nil {
		require.ErrorIs(t, err, protocol.ErrBadContextResponse)
		var cre *protocol.ContextResponseError
		require.ErrorAs(t, err, &cre)
		require.Equal(t, a.Name(), cre.Adapter)
		require.Equal(t, protocol.Context{}, ctx)
		return
	}
	require.True(t, json.Valid(body) && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")), "accepted a body that is not a JSON object: %q", body)
	require.False(t, openai.IsFailureFinishReason(ctx.FinishReason), "accepted finish_reason %q", ctx.FinishReason)
	requireRaw(t, "handle", ctx.Handle, '{')
	requireRaw(t, "usage", ctx.Usage, '{')
	requireRaw(t, "prompt_token_ids", ctx.PromptTokenIDs, '[')
	if ctx.Finished {
		require.True(t, openai.EndsAtFirstToken(ctx.FinishReason), "finished on %q", ctx.FinishReason)
	}
	if a.Name() == vllm.Name {
		require.Equal(t, ctx.Handle == nil && openai.EndsAtFirstToken(ctx.FinishReason), ctx.Finished)
	}
	if a.Name() == trtllm.Name && !ctx.Finished {
		require.NotNil(t, ctx.Handle, "trtllm continues only with a handle")
	}

	again, err := a.ParseContextResponse(in, body)
	require.NoError(t, err)
	require.Equal(t, ctx, again, "not deterministic")
	for i := range body {
		body[i] = 'x' // the caller may reuse its buffer
	}
	require.Equal(t, again, ctx, "the Context aliases the body")
	copy(body, orig)

	if ctx.Finished {
		_, err := a.GenerationRequest(in, ctx)
		require.ErrorIs(t, err, protocol.ErrBadInput)
		return
	}
	gen, err := a.GenerationRequest(in, ctx)
	require.NoError(t, err, "an accepted Context must give a generation request")
	out := decodeObject(t, gen.Body)
	switch a.Name() {
	case vllm.Name:
		if ctx.Handle == nil {
			require.NotContains(t, out, disagg.FieldKVTransferParams)
		} else {
			require.JSONEq(t, string(ctx.Handle), string(out[disagg.FieldKVTransferParams]))
		}
	case trtllm.Name:
		params := decodeObject(t, out[disagg.FieldDisaggregatedParams])
		require.JSONEq(t, `"generation_only"`, string(params["request_type"]))
		require.Equal(t, "1099511627783", string(params["disagg_request_id"]))
		handle := decodeObject(t, ctx.Handle)
		for k, v := range handle {
			if !slices.Contains([]string{"request_type", "disagg_request_id", "conversation_id", "ctx_usage"}, k) {
				require.JSONEq(t, string(v), string(params[k]), "handle key %q", k)
			}
		}
		if ctx.PromptTokenIDs != nil && in.Endpoint == protocol.EndpointCompletions {
			require.JSONEq(t, string(ctx.PromptTokenIDs), string(out["prompt"]))
		}
	}
}

// requireRaw checks that a raw Context field is nil or one valid JSON value
// starting with open.
func requireRaw(t *testing.T, name string, raw json.RawMessage, open byte) {
	t.Helper()
	if raw == nil {
		return
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	require.True(t, json.Valid(raw) && len(trimmed) > 0 && trimmed[0] == open, "%s is not valid: %q", name, raw)
}

// decodeObject decodes a JSON object the way the engines (Python) do:
// keys exactly as written, the last of duplicates winning.
func decodeObject(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m), "not JSON: %q", b)
	require.NotNil(t, m, "not an object: %q", b)
	return m
}

// FuzzAdapterRequests feeds every adapter's ContextRequest and
// GenerationRequest arbitrary client bodies. A body that is not a JSON
// object is ErrBadInput; otherwise both requests are JSON objects, the
// client's keys duet does not own reach the worker byte for byte, and the
// client's values for disagg.InternalFields have no effect at all.
func FuzzAdapterRequests(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("..", "*", "testdata", "requests", "*"))
	require.NoError(f, err)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		for i := range uint8(len(Names()) * 2) {
			f.Add(b, i)
		}
	}
	f.Add([]byte(`{"model":"m","kv_transfer_params":{"remote_host":"evil"},"disaggregated_params":{"ctx_request_id":1},"bootstrap_room":1,"prompt_token_ids":[1],"kv\u005ftransfer_params":2}`), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		a, err := ByName(Names()[int(which/2)%len(Names())])
		require.NoError(t, err)
		in := fuzzInput(endpointOf(which), body)
		ctx := protocol.Context{Handle: []byte(`{"ctx_request_id":3,"k":"v"}`), Usage: []byte(`{"prompt_tokens":2}`),
			PromptTokenIDs: []byte(`[1,2]`), PromptTokens: 2}
		orig := bytes.Clone(body)
		var client map[string]json.RawMessage
		if json.Unmarshal(body, &client) != nil || client == nil {
			_, err := a.ContextRequest(in)
			require.ErrorIs(t, err, protocol.ErrBadInput, "accepted a client body that is not a JSON object: %q", body)
			_, err = a.GenerationRequest(in, ctx)
			require.ErrorIs(t, err, protocol.ErrBadInput)
			return
		}
		stripped := map[string]json.RawMessage{}
		strippedBody := []byte("{")
		for k, v := range client {
			if !slices.Contains(disagg.InternalFields, k) {
				stripped[k] = v
				key, err := json.Marshal(k)
				require.NoError(t, err)
				if len(strippedBody) > 1 {
					strippedBody = append(strippedBody, ',')
				}
				strippedBody = append(append(append(strippedBody, key...), ':'), v...)
			}
		}
		strippedBody = append(strippedBody, '}')
		inStripped := in
		inStripped.Body = strippedBody
		for _, leg := range []struct {
			name string
			call func(protocol.Input) (protocol.Request, error)
		}{
			{"context", a.ContextRequest},
			{"generation", func(in protocol.Input) (protocol.Request, error) { return a.GenerationRequest(in, ctx) }},
		} {
			req, err := leg.call(in)
			require.NoError(t, err, leg.name)
			require.Equal(t, orig, body, "%s request modified the body", leg.name)
			for _, h := range req.Headers {
				require.NotContains(t, h.Name+h.Value, "\n", "header %q", h.Name)
			}
			out := decodeObject(t, req.Body)
			for k, v := range stripped {
				if owned(a.Name(), leg.name, k) {
					continue
				}
				require.Contains(t, out, k, "%s request dropped client key %q", leg.name, k)
				require.Equal(t, string(v), string(out[k]), "%s request changed client key %q", leg.name, k)
			}
			other, err := leg.call(inStripped)
			require.NoError(t, err)
			require.Equal(t, string(other.Body), string(req.Body), "client internal fields changed the %s request", leg.name)
		}
	})
}

// owned reports whether the adapter writes or removes a client key on a
// leg (besides disagg.InternalFields).
func owned(adapter, leg, key string) bool {
	var keys []string
	switch {
	case adapter == trtllm.Name && leg == "context":
		keys = []string{"nvext", "stream", "stream_options"}
	case adapter == trtllm.Name:
		keys = []string{"nvext", "prompt"}
	case adapter == vllm.Name && leg == "context":
		keys = []string{"stream", "stream_options", "max_tokens", "max_completion_tokens", "min_tokens", "min_completion_tokens"}
	}
	return slices.Contains(keys, key)
}

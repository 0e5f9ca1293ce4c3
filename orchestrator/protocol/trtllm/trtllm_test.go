package trtllm_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/goldentest"
	"github.com/duet-serve/duet/orchestrator/protocol/trtllm"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files")

// requestID is above 2^53: a float64 on the way would change it.
const requestID = 1152921504606846977 // 2^60 + 1

func chat() protocol.Input {
	return protocol.Input{Endpoint: protocol.EndpointChat, RequestID: requestID, ConversationID: "conv-1"}
}

func completions() protocol.Input {
	in := chat()
	in.Endpoint = protocol.EndpointCompletions
	return in
}

func TestGolden(t *testing.T) {
	noConversation := chat()
	noConversation.ConversationID = ""
	zeroID := chat()
	zeroID.RequestID = 0
	noEndpoint := chat()
	noEndpoint.Endpoint = 0
	bad := protocol.ErrBadContextResponse

	goldentest.Run(t, trtllm.New(), []goldentest.Case{
		{Name: "chat", Input: chat(), Request: "chat.json", Response: "chat_not_finished.json"},
		{Name: "chat_stream", Input: chat(), Request: "chat_stream.json", Response: "chat_not_finished.json"},
		{Name: "chat_max_completion_tokens", Input: chat(), Request: "chat_max_completion_tokens.json", Response: "chat_not_finished.json"},
		{Name: "chat_unknown_fields_kept_nvext_dropped", Input: chat(), Request: "chat_extra_fields.json", Response: "chat_not_finished.json"},
		{Name: "chat_client_internal_fields_dropped", Input: chat(), Request: "chat_internal_fields.json", Response: "chat_not_finished.json"},
		{Name: "chat_no_conversation_id", Input: noConversation, Request: "chat.json", Response: "chat_not_finished.json"},
		{Name: "chat_length_uint64_ctx_request_id", Input: chat(), Request: "chat_stream.json", Response: "chat_length.json"},
		{Name: "chat_ctx_without_usage", Input: chat(), Request: "chat.json", Response: "chat_no_usage.json"},
		{Name: "chat_finished_at_context", Input: chat(), Request: "chat_stream.json", Response: "chat_stop.json"},
		{Name: "completion", Input: completions(), Request: "completion.json", Response: "completion_not_finished.json"},
		{Name: "completion_stream", Input: completions(), Request: "completion_stream.json", Response: "completion_not_finished.json"},
		{Name: "completion_ctx_without_prompt_token_ids", Input: completions(), Request: "completion.json", Response: "completion_no_prompt_token_ids.json"},
		{Name: "completion_finished_at_context", Input: completions(), Request: "completion.json", Response: "completion_stop.json"},

		{Name: "ctx_zero_choices", Input: chat(), Request: "chat.json", Response: "zero_choices.json", WantErr: bad},
		{Name: "ctx_two_choices", Input: chat(), Request: "chat.json", Response: "two_choices.json", WantErr: bad},
		{Name: "ctx_missing_handle", Input: chat(), Request: "chat.json", Response: "missing_handle.json", WantErr: bad},
		{Name: "ctx_handle_without_ctx_request_id", Input: chat(), Request: "chat.json", Response: "handle_without_ctx_request_id.json", WantErr: bad},
		{Name: "ctx_handle_not_object", Input: chat(), Request: "chat.json", Response: "handle_not_object.json", WantErr: bad},
		{Name: "chat_content_filter_at_first_token_is_finished", Input: chat(), Request: "chat.json", Response: "chat_content_filter.json"},
		{Name: "chat_null_finish_reason_with_handle_continues", Input: chat(), Request: "chat.json", Response: "no_finish_reason.json"},
		{Name: "ctx_cancelled", Input: chat(), Request: "chat.json", Response: "cancelled.json", WantErr: bad},
		{Name: "ctx_prompt_token_ids_not_array", Input: chat(), Request: "chat.json", Response: "prompt_token_ids_not_array.json", WantErr: bad},
		{Name: "ctx_not_json", Input: chat(), Request: "chat.json", Response: "not_json.txt", WantErr: bad},
		{Name: "ctx_truncated", Input: chat(), Request: "chat.json", Response: "truncated.json", WantErr: bad},

		{Name: "input_body_not_object", Input: chat(), Request: "not_object.json", WantErr: protocol.ErrBadInput},
		{Name: "input_request_id_zero", Input: zeroID, Request: "chat.json", WantErr: protocol.ErrBadInput},
		{Name: "input_endpoint_unset", Input: noEndpoint, Request: "chat.json", WantErr: protocol.ErrBadInput},
	}, *update)
}

// Regression: ids above 2^53 (TensorRT-LLM's ctx_request_id, duet's
// disagg_request_id, unknown engine integers) must never pass through a
// float64, which would round them.
func TestLargeIntegersSurviveExactly(t *testing.T) {
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat_extra_fields.json")
	resp := goldentest.ReadFile(t, "responses", "chat_not_finished.json")
	res := goldentest.Exchange(trtllm.New(), in, resp)
	require.NoError(t, res.Err)

	ctxBody := compact(t, res.ContextRequest.Body)
	require.Contains(t, ctxBody, `"disagg_request_id":1152921504606846977`)
	require.Contains(t, ctxBody, `"seed":12345678901234567`)

	gen := compact(t, res.GenerationRequest.Body)
	for _, want := range []string{
		`"ctx_request_id":9007199254740993`,
		`"disagg_request_id":1152921504606846977`,
		`"epoch":18446744073709551615`,
		`"seed":12345678901234567`,
	} {
		require.Contains(t, gen, want)
	}

	resp = goldentest.ReadFile(t, "responses", "chat_length.json")
	res = goldentest.Exchange(trtllm.New(), in, resp)
	require.NoError(t, res.Err)
	require.Contains(t, compact(t, res.GenerationRequest.Body), `"ctx_request_id":18446744073709551557`)
}

// compact returns b without insignificant space; numbers stay as written.
func compact(t *testing.T, b []byte) string {
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, b))
	return buf.String()
}

func TestContextResponseErrorDetail(t *testing.T) {
	a := trtllm.New()
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat.json")

	_, err := a.ParseContextResponse(in, goldentest.ReadFile(t, "responses", "two_choices.json"))
	var cre *protocol.ContextResponseError
	require.ErrorAs(t, err, &cre)
	require.Equal(t, trtllm.Name, cre.Adapter)
	require.Equal(t, "2 choices, want 1", cre.Reason)

	_, err = a.ParseContextResponse(in, goldentest.ReadFile(t, "responses", "not_json.txt"))
	require.ErrorIs(t, err, protocol.ErrBadContextResponse)
	var syntax *json.SyntaxError
	require.ErrorAs(t, err, &syntax)
}

func TestGenerationRequestRejectsUnusableContext(t *testing.T) {
	a := trtllm.New()
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat.json")
	handle := json.RawMessage(`{"ctx_request_id":1}`)

	for name, ctx := range map[string]protocol.Context{
		"finished":          {Finished: true, FinishReason: "stop", Handle: handle},
		"no handle":         {FinishReason: "not_finished"},
		"handle not object": {FinishReason: "not_finished", Handle: json.RawMessage(`[1]`)},
		"usage not JSON":    {FinishReason: "not_finished", Handle: handle, Usage: json.RawMessage(`{`)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.GenerationRequest(in, ctx)
			require.ErrorIs(t, err, protocol.ErrBadInput)
			require.True(t, strings.HasPrefix(err.Error(), "trtllm: "), err.Error())
		})
	}
}

func TestAdapterIdentity(t *testing.T) {
	a := trtllm.New()
	require.Equal(t, "trtllm", a.Name())
	require.False(t, a.Concurrent())
	var zero trtllm.Adapter
	_, err := zero.ContextRequest(protocol.Input{Endpoint: protocol.EndpointChat, RequestID: requestID, Body: []byte(`{}`)})
	require.NoError(t, err, "the zero value is ready to use")
}

// benchChat returns a chat input of n messages of ~540 bytes each (n=40:
// ~22 KB, a ~5k-token conversation) and a matching not_finished ctx
// response with 125 prompt token ids per message.
func benchChat(b *testing.B, n int) (protocol.Input, []byte) {
	var msgs []map[string]string
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": strings.Repeat("lorem ipsum dolor sit amet ", 20)})
	}
	body, err := json.Marshal(map[string]any{"model": "llama-3-8b", "messages": msgs, "max_tokens": 256, "stream": true})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int, 125*n)
	for i := range ids {
		ids[i] = 100000 + i
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		b.Fatal(err)
	}
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama-3-8b",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Two"},"finish_reason":"not_finished",` +
		`"disaggregated_params":{"request_type":"context_only","first_gen_tokens":[11874],"ctx_request_id":9007199254740993,` +
		`"encoded_opaque_state":"AAECAwQFBgc=","draft_tokens":null}}],` +
		`"usage":{"prompt_tokens":5000,"completion_tokens":1,"total_tokens":5001,"prompt_tokens_details":{"cached_tokens":4096}},` +
		`"prompt_token_ids":` + string(idsJSON) + `}`)
	in := chat()
	in.Body = body
	return in, resp
}

// BenchmarkExchange measures the adapter's share of one request: context
// request, parsing the ctx response, generation request.
func BenchmarkExchange(b *testing.B) {
	for _, n := range []int{1, 40} {
		a := trtllm.New()
		in, resp := benchChat(b, n)
		b.Run(fmt.Sprintf("messages=%d/context_request", n), func(b *testing.B) {
			b.SetBytes(int64(len(in.Body)))
			for b.Loop() {
				if _, err := a.ContextRequest(in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("messages=%d/parse_context_response", n), func(b *testing.B) {
			b.SetBytes(int64(len(resp)))
			for b.Loop() {
				if _, err := a.ParseContextResponse(in, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
		ctx, err := a.ParseContextResponse(in, resp)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("messages=%d/generation_request", n), func(b *testing.B) {
			b.SetBytes(int64(len(in.Body)))
			for b.Loop() {
				if _, err := a.GenerationRequest(in, ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

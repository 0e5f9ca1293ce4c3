package vllm_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/goldentest"
	"github.com/duet-serve/duet/orchestrator/protocol/vllm"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files")

func chat() protocol.Input {
	return protocol.Input{
		Endpoint:       protocol.EndpointChat,
		RequestID:      1152921504606846977,
		RequestIDText:  "duet-0000000042-1",
		ConversationID: "conv-1", // vLLM has no use for it
	}
}

func completions() protocol.Input {
	in := chat()
	in.Endpoint = protocol.EndpointCompletions
	return in
}

func TestGolden(t *testing.T) {
	noIDText := chat()
	noIDText.RequestIDText = ""
	badIDText := chat()
	badIDText.RequestIDText = "a\r\nX-Evil: 1"
	bad := protocol.ErrBadContextResponse

	goldentest.Run(t, vllm.New(), []goldentest.Case{
		{Name: "chat", Input: chat(), Request: "chat.json", Response: "chat_prefill.json"},
		{Name: "chat_stream", Input: chat(), Request: "chat_stream.json", Response: "chat_prefill.json"},
		{Name: "chat_max_completion_tokens", Input: chat(), Request: "chat_max_completion_tokens.json", Response: "chat_prefill.json"},
		{Name: "chat_unknown_fields_kept_min_tokens_and_min_completion_tokens_dropped_on_prefill", Input: chat(), Request: "chat_extra_fields.json", Response: "chat_prefill.json"},
		{Name: "chat_client_internal_fields_dropped", Input: chat(), Request: "chat_internal_fields.json", Response: "chat_prefill_no_params.json"},
		{Name: "chat_prefill_without_params", Input: chat(), Request: "chat_stream.json", Response: "chat_prefill_no_params.json"},
		{Name: "chat_prefill_with_null_params", Input: chat(), Request: "chat.json", Response: "chat_prefill_null_params.json"},
		{Name: "chat_finished_at_prefill", Input: chat(), Request: "chat_stream.json", Response: "chat_stop.json"},
		{Name: "chat_remote_decode_finish_reason_continues", Input: chat(), Request: "chat.json", Response: "chat_prefill_remote_decode.json"},
		{Name: "chat_null_finish_reason_continues", Input: chat(), Request: "chat_stream.json", Response: "chat_prefill_null_finish.json"},
		{Name: "chat_stop_with_params_continues", Input: chat(), Request: "chat.json", Response: "chat_stop_with_params.json"},
		{Name: "completion_remote_decode_finish_reason_continues", Input: completions(), Request: "completion.json", Response: "completion_prefill_remote_decode.json"},
		{Name: "chat_request_id_text_defaults_to_request_id", Input: noIDText, Request: "chat.json", Response: "chat_prefill.json"},
		{Name: "completion", Input: completions(), Request: "completion.json", Response: "completion_prefill.json"},
		{Name: "completion_stream", Input: completions(), Request: "completion_stream.json", Response: "completion_prefill.json"},
		{Name: "completion_finished_at_prefill", Input: completions(), Request: "completion.json", Response: "completion_stop.json"},

		{Name: "ctx_zero_choices", Input: chat(), Request: "chat.json", Response: "zero_choices.json", WantErr: bad},
		{Name: "ctx_two_choices", Input: chat(), Request: "chat.json", Response: "two_choices.json", WantErr: bad},
		{Name: "ctx_params_not_object", Input: chat(), Request: "chat.json", Response: "params_not_object.json", WantErr: bad},
		{Name: "ctx_abort", Input: chat(), Request: "chat.json", Response: "abort.json", WantErr: bad},
		{Name: "ctx_not_json", Input: chat(), Request: "chat.json", Response: "not_json.txt", WantErr: bad},

		{Name: "input_body_not_object", Input: chat(), Request: "not_object.json", WantErr: protocol.ErrBadInput},
		{Name: "input_request_id_text_not_header_safe", Input: badIDText, Request: "chat.json", WantErr: protocol.ErrBadInput},
	}, *update)
}

// Regression: the prefill params must reach the decode leg byte for byte,
// integers above 2^53 included.
func TestHandleRelayedVerbatim(t *testing.T) {
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat.json")
	res := goldentest.Exchange(vllm.New(), in, goldentest.ReadFile(t, "responses", "chat_prefill.json"))
	require.NoError(t, res.Err)

	var gen struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	require.NoError(t, json.Unmarshal(res.GenerationRequest.Body, &gen))
	require.Equal(t, string(res.Context.Handle), string(gen.KV))
	var kv bytes.Buffer
	require.NoError(t, json.Compact(&kv, gen.KV))
	require.Contains(t, kv.String(), `"engine_future_field":18446744073709551615`)
	require.Equal(t, []protocol.Header{{Name: vllm.HeaderRequestID, Value: "duet-0000000042-1"}}, res.GenerationRequest.Headers)
	require.Equal(t, res.ContextRequest.Headers, res.GenerationRequest.Headers)
}

func TestGenerationRequestRejectsFinishedContext(t *testing.T) {
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat.json")
	_, err := vllm.New().GenerationRequest(in, protocol.Context{Finished: true, FinishReason: "stop"})
	require.ErrorIs(t, err, protocol.ErrBadInput)
}

func TestAdapterIdentity(t *testing.T) {
	a := vllm.New()
	require.Equal(t, "vllm", a.Name())
	require.False(t, a.Concurrent())
}

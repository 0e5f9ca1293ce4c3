package sglang_test

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/goldentest"
	"github.com/duet-serve/duet/orchestrator/protocol/sglang"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files")

func chat() protocol.Input {
	return protocol.Input{
		Endpoint:  protocol.EndpointChat,
		RequestID: 1152921504606846977,
		CtxWorker: protocol.WorkerAddr{Host: "10.0.0.5", BootstrapPort: 9001},
		Room:      protocol.MaxRoom, // 2^63-1: exact only without a float64
	}
}

func completions() protocol.Input {
	in := chat()
	in.Endpoint = protocol.EndpointCompletions
	return in
}

func TestGolden(t *testing.T) {
	defaultPort := chat()
	defaultPort.CtxWorker.BootstrapPort = 0
	defaultPort.Room = 0
	noHost := chat()
	noHost.CtxWorker.Host = ""
	roomTooBig := chat()
	roomTooBig.Room = protocol.MaxRoom + 1
	portTooBig := chat()
	portTooBig.CtxWorker.BootstrapPort = 65536

	goldentest.Run(t, sglang.New(), []goldentest.Case{
		{Name: "chat", Input: chat(), Request: "chat.json", Response: "prefill.json"},
		{Name: "chat_stream_on_both_legs", Input: chat(), Request: "chat_stream.json"},
		{Name: "chat_unknown_bootstrap_port_is_null_room_zero", Input: defaultPort, Request: "chat.json"},
		{Name: "chat_unknown_fields_kept", Input: chat(), Request: "chat_extra_fields.json"},
		{Name: "chat_client_internal_fields_dropped", Input: chat(), Request: "chat_internal_fields.json"},
		{Name: "completion", Input: completions(), Request: "completion.json"},
		{Name: "completion_stream", Input: completions(), Request: "completion_stream.json"},
		{Name: "prefill_response_only_drained", Input: chat(), Request: "chat.json", Response: "not_json.txt"},

		{Name: "input_no_ctx_host", Input: noHost, Request: "chat.json", WantErr: protocol.ErrBadInput},
		{Name: "input_room_above_max", Input: roomTooBig, Request: "chat.json", WantErr: protocol.ErrBadInput},
		{Name: "input_bootstrap_port_above_max", Input: portTooBig, Request: "chat.json", WantErr: protocol.ErrBadInput},
		{Name: "input_body_not_object", Input: chat(), Request: "not_object.json", WantErr: protocol.ErrBadInput},
	}, *update)
}

func TestBothLegsCarryTheSameBody(t *testing.T) {
	a := sglang.New()
	in := chat()
	in.Body = goldentest.ReadFile(t, "requests", "chat_stream.json")
	ctxReq, err := a.ContextRequest(in)
	require.NoError(t, err)
	genReq, err := a.GenerationRequest(in, protocol.Context{})
	require.NoError(t, err)
	require.Equal(t, ctxReq, genReq)
	require.Contains(t, string(ctxReq.Body), `"bootstrap_room":9223372036854775807`)
	require.Contains(t, string(ctxReq.Body), `"stream":true`)
	ctxReq.Body[0] = 'x'
	require.False(t, bytes.Equal(ctxReq.Body, genReq.Body), "the two legs must not share a buffer")
}

func TestAdapterIdentity(t *testing.T) {
	a := sglang.New()
	require.Equal(t, "sglang", a.Name())
	require.True(t, a.Concurrent())
	ctx, err := a.ParseContextResponse(protocol.Input{}, nil)
	require.NoError(t, err)
	require.Equal(t, protocol.Context{}, ctx)
}

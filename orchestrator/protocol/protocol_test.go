package protocol_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		ep          protocol.Endpoint
		valid       bool
		name, route string
	}{
		{protocol.EndpointChat, true, "chat", "/v1/chat/completions"},
		{protocol.EndpointCompletions, true, "completions", "/v1/completions"},
		{0, false, "Endpoint(0)", ""},
		{3, false, "Endpoint(3)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.valid, tc.ep.Valid())
			require.Equal(t, tc.name, tc.ep.String())
			require.Equal(t, tc.route, tc.ep.Path())
		})
	}
}

func TestInputValidate(t *testing.T) {
	valid := func() protocol.Input {
		return protocol.Input{Endpoint: protocol.EndpointChat, Body: []byte(`{}`), RequestID: protocol.MinRequestID}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*protocol.Input)
		wantErr string
	}{
		{name: "valid", edit: func(*protocol.Input) {}},
		{name: "max ids", edit: func(in *protocol.Input) {
			in.RequestID, in.Room, in.CtxWorker.BootstrapPort = protocol.MaxRequestID, protocol.MaxRoom, 65535
		}},
		{name: "no endpoint", edit: func(in *protocol.Input) { in.Endpoint = 0 },
			wantErr: "invalid adapter input: endpoint Endpoint(0)"},
		{name: "empty body", edit: func(in *protocol.Input) { in.Body = nil },
			wantErr: "invalid adapter input: empty body"},
		{name: "request id below range", edit: func(in *protocol.Input) { in.RequestID = protocol.MinRequestID - 1 },
			wantErr: "invalid adapter input: request id 1099511627775 outside [1099511627776, 9223372036854775807]"},
		{name: "request id above range", edit: func(in *protocol.Input) { in.RequestID = protocol.MaxRequestID + 1 },
			wantErr: "invalid adapter input: request id 9223372036854775808 outside [1099511627776, 9223372036854775807]"},
		{name: "room above range", edit: func(in *protocol.Input) { in.Room = protocol.MaxRoom + 1 },
			wantErr: "invalid adapter input: bootstrap room 9223372036854775808 above 9223372036854775807"},
		{name: "request id text with newline", edit: func(in *protocol.Input) { in.RequestIDText = "a\nb" },
			wantErr: `invalid adapter input: request id text "a\nb" has control characters`},
		{name: "negative bootstrap port", edit: func(in *protocol.Input) { in.CtxWorker.BootstrapPort = -1 },
			wantErr: "invalid adapter input: bootstrap port -1 outside [0, 65535]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := valid()
			tc.edit(&in)
			err := in.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
			require.ErrorIs(t, err, protocol.ErrBadInput)
		})
	}
}

func TestContextResponseError(t *testing.T) {
	var syntax *json.SyntaxError
	cause := json.Unmarshal([]byte("{"), new(any))
	require.ErrorAs(t, cause, &syntax)

	err := error(&protocol.ContextResponseError{Adapter: "trtllm", Reason: "not JSON", Err: cause})
	require.EqualError(t, err, "trtllm: bad context response: not JSON: unexpected end of JSON input")
	require.ErrorIs(t, err, protocol.ErrBadContextResponse)
	require.ErrorAs(t, err, &syntax)
	require.False(t, errors.Is(err, protocol.ErrBadInput))

	err = &protocol.ContextResponseError{Adapter: "vllm", Reason: "0 choices, want 1"}
	require.EqualError(t, err, "vllm: bad context response: 0 choices, want 1")
	require.ErrorIs(t, err, protocol.ErrBadContextResponse)
}

package wire

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duet-serve/duet/orchestrator/protocol"
)

func TestParseContext(t *testing.T) {
	const chatPrefix = `{"id":"c1","model":"m","created":7,"choices":[{"index":0,"message":`
	for _, tc := range []struct {
		name     string
		ep       protocol.Endpoint
		body     string
		wantText string
		wantErr  string
	}{
		{name: "chat string content", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, wantText: "hi"},
		{name: "chat content parts joined", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]},"finish_reason":"stop"}]}`, wantText: "ab"},
		{name: "chat null content", ep: protocol.EndpointChat,
			body: chatPrefix + `{"role":"assistant","content":null,"tool_calls":[]},"finish_reason":"tool_calls"}]}`, wantText: ""},
		{name: "chat ignores text", ep: protocol.EndpointChat,
			body: `{"choices":[{"text":"t","finish_reason":"stop"}]}`, wantText: ""},
		{name: "completion text", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","message":{"role":"assistant","content":"m"},"finish_reason":"stop"}]}`, wantText: "t"},
		{name: "usage not an object", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"stop"}],"usage":[1]}`, wantErr: "x: bad context response: usage: not a JSON object"},
		{name: "usage field of wrong type", ep: protocol.EndpointCompletions,
			body:    `{"choices":[{"text":"t","finish_reason":"stop"}],"usage":{"prompt_tokens":"3"}}`,
			wantErr: "x: bad context response: usage: json: cannot unmarshal string into Go struct field Usage.prompt_tokens of type int"},
		{name: "id of wrong type", ep: protocol.EndpointCompletions,
			body: `{"id":5,"choices":[{"text":"t","finish_reason":"stop"}]}`, wantErr: "x: bad context response: id: json: cannot unmarshal number into Go value of type string"},
		{name: "choices not a list", ep: protocol.EndpointCompletions,
			body: `{"choices":{"text":"t"}}`, wantErr: "x: bad context response: choices: json: cannot unmarshal object into Go value of type []wire.choice"},
		{name: "no choices key", ep: protocol.EndpointCompletions, body: `{"id":"c"}`, wantErr: "x: bad context response: 0 choices, want 1"},
		{name: "empty finish_reason is left to the adapter", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":""}]}`, wantText: "t"},
		{name: "null finish_reason is left to the adapter", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":null}]}`, wantText: "t"},
		{name: "spaces after colons and commas", ep: protocol.EndpointChat,
			body: `{"choices": [{"index": 0, "message": {"role": "assistant", "content": "m"}, "finish_reason": "length"}]}`, wantText: "m"},
		{name: "error finish_reason", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"error"}]}`, wantErr: `x: bad context response: finish_reason "error"`},
		{name: "timeout finish_reason", ep: protocol.EndpointCompletions,
			body: `{"choices":[{"text":"t","finish_reason":"timeout"}]}`, wantErr: `x: bad context response: finish_reason "timeout"`},
		{name: "array body", ep: protocol.EndpointCompletions, body: `[]`, wantErr: "x: bad context response: not a JSON object"},
		{name: "empty body", ep: protocol.EndpointCompletions, body: ``, wantErr: "x: bad context response: not JSON: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseContext("x", tc.ep, []byte(tc.body))
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				require.True(t, errors.Is(err, protocol.ErrBadContextResponse))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantText, p.Context.Text)
		})
	}
}

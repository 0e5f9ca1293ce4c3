package sglang

import (
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/wire"
	"github.com/duet-serve/duet/proto/disagg"
)

// Name is the adapter's configuration name.
const Name = "sglang"

// Adapter speaks SGLang's concurrent bootstrap protocol. The zero value is
// ready to use.
type Adapter struct{}

var _ protocol.Adapter = (*Adapter)(nil)

// New returns an SGLang adapter.
func New() *Adapter { return &Adapter{} }

// Name returns "sglang".
func (*Adapter) Name() string { return Name }

// Concurrent returns true: both legs are sent at once.
func (*Adapter) Concurrent() bool { return true }

// PortableHandle is false: SGLang has no handle; the prefill leg waits for
// the one decode server that registers the request's bootstrap room
// (sglang/srt/disaggregation/mooncake/conn.py, 0.5.x), so a failed
// generation leg is retried with a fresh pair and room.
func (*Adapter) PortableHandle() bool { return false }

// ContinuesFinalMessage is true: SGLang's ChatCompletionRequest has
// continue_final_message; it renders the chat without the final assistant
// message and appends its text (python/sglang/srt/entrypoints/openai/
// serving_chat.py, 2026). It has no add_generation_prompt and ignores the
// field.
func (*Adapter) ContinuesFinalMessage() bool { return true }

// ContextRequest returns the prefill request, which is the same as the
// decode request (see GenerationRequest).
func (*Adapter) ContextRequest(in protocol.Input) (protocol.Request, error) {
	return request(in)
}

// ParseContextResponse ignores the prefill response, which the caller only
// drains, and returns the zero Context; it never fails.
func (*Adapter) ParseContextResponse(protocol.Input, []byte) (protocol.Context, error) {
	return protocol.Context{}, nil
}

// GenerationRequest returns the decode request: the client's body (its own
// stream and limits) with bootstrap_host = in.CtxWorker.Host,
// bootstrap_port = in.CtxWorker.BootstrapPort (null when 0: SGLang's router
// sends null for a prefill configured without a port, and the decode
// worker then uses its own bootstrap port; sglang-model-gateway
// pd_router.rs, mini_lb.py) and bootstrap_room = in.Room. ctx is ignored, so it can be built before the
// prefill is sent. CtxWorker.Host is required.
func (*Adapter) GenerationRequest(in protocol.Input, _ protocol.Context) (protocol.Request, error) {
	return request(in)
}

// request builds the body both legs share.
func request(in protocol.Input) (protocol.Request, error) {
	body, err := wire.ClientBody(Name, in)
	if err != nil {
		return protocol.Request{}, err
	}
	if in.CtxWorker.Host == "" {
		return protocol.Request{}, fmt.Errorf("%s: %w: no ctx worker host", Name, protocol.ErrBadInput)
	}
	port := wire.Null // the decode worker falls back to its own bootstrap port, as with SGLang's router
	if in.CtxWorker.BootstrapPort != 0 {
		port = wire.Int(in.CtxWorker.BootstrapPort)
	}
	body.Set(disagg.FieldBootstrapHost, wire.String(in.CtxWorker.Host))
	body.Set(disagg.FieldBootstrapPort, port)
	body.Set(disagg.FieldBootstrapRoom, wire.Uint(in.Room))
	return protocol.Request{Body: body.Encode()}, nil
}

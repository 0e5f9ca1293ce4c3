package vllm

import (
	"fmt"
	"strconv"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/wire"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// Name is the adapter's configuration name.
const Name = "vllm"

// HeaderRequestID is the header that gives both legs the same request id.
const HeaderRequestID = "X-Request-Id"

// Body keys the adapter writes or removes on the prefill leg.
const (
	keyStream              = "stream"
	keyStreamOptions       = "stream_options"
	keyMaxTokens           = "max_tokens"
	keyMaxCompletionTokens = "max_completion_tokens"
	keyMinTokens           = "min_tokens"
	// keyMinCompletionTokens must go too: vLLM validates min against
	// max_tokens 1 and answers 400 (vLLM's toy_proxy_server.py pops both
	// since April 2026).
	keyMinCompletionTokens = "min_completion_tokens"
)

// prefillParams is the kv_transfer_params of a prefill request, encoded
// once: the keys of disagg.KVTransferParams a prefill sets, in sorted order.
var prefillParams = func() []byte {
	var o wire.Object
	o.Set("do_remote_decode", wire.True)
	o.Set("do_remote_prefill", wire.False)
	for _, k := range []string{"remote_engine_id", "remote_block_ids", "remote_host", "remote_port"} {
		o.Set(k, wire.Null)
	}
	return o.Encode()
}()

// one is the JSON number 1.
var one = wire.Int(1)

// Adapter speaks vLLM's NIXL prefill-then-decode protocol. The zero value
// is ready to use.
type Adapter struct{}

var _ protocol.Adapter = (*Adapter)(nil)

// New returns a vLLM adapter.
func New() *Adapter { return &Adapter{} }

// Name returns "vllm".
func (*Adapter) Name() string { return Name }

// Concurrent returns false: the prefill runs first.
func (*Adapter) Concurrent() bool { return false }

// PortableHandle is true: kv_transfer_params name the prefill engine
// (remote_engine_id, remote_host, remote_port) and its blocks; any decode
// worker can pull them, and the prefill keeps them until pulled or for
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s; since vLLM #41383, a 30 s
// kv_lease_duration) (vllm/distributed/kv_transfer/kv_connector/v1/
// nixl_connector.py, v0.10-v0.12 and main 2026-05).
func (*Adapter) PortableHandle() bool { return true }

// ContinuesFinalMessage is true: vLLM's ChatCompletionRequest has
// continue_final_message (vllm/entrypoints/openai/protocol.py, v0.6-main
// 2026), which must come with add_generation_prompt false.
func (*Adapter) ContinuesFinalMessage() bool { return true }

// ContextRequest returns the prefill request: the client's body with the
// prefill kv_transfer_params, stream false, max_tokens 1,
// max_completion_tokens 1 if the body has it, and no stream_options,
// min_tokens or min_completion_tokens; header X-Request-Id.
func (*Adapter) ContextRequest(in protocol.Input) (protocol.Request, error) {
	body, err := wire.ClientBody(Name, in)
	if err != nil {
		return protocol.Request{}, err
	}
	body.Set(disagg.FieldKVTransferParams, prefillParams)
	body.Set(keyStream, wire.False)
	body.Set(keyMaxTokens, one)
	if body.Has(keyMaxCompletionTokens) {
		body.Set(keyMaxCompletionTokens, one)
	}
	body.Delete(keyStreamOptions, keyMinTokens, keyMinCompletionTokens)
	return request(in, body), nil
}

// ParseContextResponse reads the prefill response. The handle decides, not
// the finish reason, which varies by implementation (vLLM answers length;
// llm-d's simulator remote_decode; others null): a top-level
// kv_transfer_params object is the Handle and decoding continues, whatever
// the reason (vLLM after April 2026 also returns params on stop; its decode
// samples its own first token from the prompt's KV, so decoding is right).
// Without params (absent or null) the request is Finished only on an end
// of sequence at the first token (stop, content_filter; older vLLM
// returns no params then); on any other reason decoding continues with
// a nil Handle and the decode worker prefills locally. Failure reasons
// (abort, error, ...) and params that are not an object are bad context
// responses.
func (*Adapter) ParseContextResponse(in protocol.Input, body []byte) (protocol.Context, error) {
	if err := in.Validate(); err != nil {
		return protocol.Context{}, fmt.Errorf("%s: %w", Name, err)
	}
	p, err := wire.ParseContext(Name, in.Endpoint, body)
	if err != nil {
		return protocol.Context{}, err
	}
	ctx := p.Context
	if p.KVTransferParams != nil && !wire.IsObject(p.KVTransferParams) {
		return protocol.Context{}, &protocol.ContextResponseError{Adapter: Name, Reason: "kv_transfer_params is not an object"}
	}
	ctx.Handle = p.KVTransferParams
	ctx.Finished = ctx.Handle == nil && openai.EndsAtFirstToken(ctx.FinishReason)
	return ctx, nil
}

// GenerationRequest returns the decode request: the client's body with
// kv_transfer_params set to ctx.Handle verbatim, or without
// kv_transfer_params when the Handle is nil; header X-Request-Id.
func (*Adapter) GenerationRequest(in protocol.Input, ctx protocol.Context) (protocol.Request, error) {
	if ctx.Finished {
		return protocol.Request{}, fmt.Errorf("%s: %w: context finished the request, nothing to generate", Name, protocol.ErrBadInput)
	}
	if !wire.IsNull(ctx.Handle) && !wire.ValidObject(ctx.Handle) {
		return protocol.Request{}, fmt.Errorf("%s: %w: handle is not a JSON object", Name, protocol.ErrBadInput)
	}
	body, err := wire.ClientBody(Name, in)
	if err != nil {
		return protocol.Request{}, err
	}
	if !wire.IsNull(ctx.Handle) {
		body.Set(disagg.FieldKVTransferParams, ctx.Handle)
	}
	return request(in, body), nil
}

// request returns body as a request with the X-Request-Id header.
func request(in protocol.Input, body wire.Object) protocol.Request {
	return protocol.Request{
		Body:    body.Encode(),
		Headers: []protocol.Header{{Name: HeaderRequestID, Value: requestID(in)}},
	}
}

// requestID is in.RequestIDText, or the decimal RequestID when it is empty.
func requestID(in protocol.Input) string {
	if in.RequestIDText != "" {
		return in.RequestIDText
	}
	return strconv.FormatUint(in.RequestID, 10)
}

package trtllm

import (
	"fmt"

	"github.com/duet-serve/duet/orchestrator/protocol"
	"github.com/duet-serve/duet/orchestrator/protocol/internal/wire"
	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/proto/openai"
)

// Name is the adapter's configuration name.
const Name = "trtllm"

// Body and disaggregated_params keys the adapter writes.
const (
	keyStream         = "stream"
	keyStreamOptions  = "stream_options"
	keyPrompt         = "prompt"
	keyPromptTokenIDs = "prompt_token_ids"

	keyRequestType     = "request_type"
	keyDisaggRequestID = "disagg_request_id"
	keyConversationID  = "conversation_id"
	keyCtxUsage        = "ctx_usage"
	keyCtxRequestID    = "ctx_request_id"

	// keyNVExt is NVIDIA's gateway extension (NIM, Dynamo): trtllm-serve's
	// request models forbid unknown keys (400 extra_forbidden,
	// openai_protocol.py), so it is dropped on both legs.
	keyNVExt = "nvext"
)

// Adapter speaks TensorRT-LLM's context-first protocol. The zero value is
// ready to use.
type Adapter struct{}

var _ protocol.Adapter = (*Adapter)(nil)

// New returns a TensorRT-LLM adapter.
func New() *Adapter { return &Adapter{} }

// Name returns "trtllm".
func (*Adapter) Name() string { return Name }

// Concurrent returns false: the context phase runs first.
func (*Adapter) Concurrent() bool { return false }

// PortableHandle is true: disaggregated_params carry the ctx worker's
// encoded_opaque_state (its cache transceiver's address) and
// ctx_request_id; any gen worker of the cluster pulls the KV with them, and
// the ctx worker holds it until then (TensorRT-LLM
// tensorrt_llm/serve/openai_protocol.py DisaggregatedParams,
// disaggregated_params.py, 2025-2026 main).
func (*Adapter) PortableHandle() bool { return true }

// ContinuesFinalMessage is false: trtllm-serve's ChatCompletionRequest has
// no continue_final_message and forbids unknown fields; a chat request
// with prompt_token_ids skips the chat template, which is how a
// continuation is sent (tensorrt_llm/serve/openai_protocol.py and
// openai_server.py, 2026 main).
func (*Adapter) ContinuesFinalMessage() bool { return false }

// ContextRequest returns the context-only request: the client's body
// (without nvext) with
// disaggregated_params {request_type, disagg_request_id, conversation_id
// (omitted when empty)}, stream false and stream_options null; and with
// in.PromptTokenIDs, when set, as the chat's prompt_token_ids or the
// completion's prompt.
func (*Adapter) ContextRequest(in protocol.Input) (protocol.Request, error) {
	body, err := wire.ClientBody(Name, in)
	if err != nil {
		return protocol.Request{}, err
	}
	body.Delete(keyNVExt)
	if !wire.IsNull(in.PromptTokenIDs) {
		body.Set(promptKey(in.Endpoint), in.PromptTokenIDs)
	}
	var params wire.Object
	params.Set(keyRequestType, wire.String(disagg.RequestContextOnly))
	params.Set(keyDisaggRequestID, wire.Uint(in.RequestID))
	if in.ConversationID != "" {
		params.Set(keyConversationID, wire.String(in.ConversationID))
	}
	body.Set(disagg.FieldDisaggregatedParams, params.Encode())
	body.Set(keyStream, wire.False)
	body.Set(keyStreamOptions, wire.Null)
	return protocol.Request{Body: body.Encode()}, nil
}

// ParseContextResponse reads the context-only response. An end of
// sequence at the first token (stop, content_filter; see
// openai.EndsAtFirstToken) means the model ended the request there: it is
// Finished, handle or not (TensorRT-LLM's own disaggregated server,
// openai_disagg_service.py _need_gen, answers the client with the context
// response then; a generation_only request would continue after the end
// of sequence from first_gen_tokens). Any other non-failure reason
// (not_finished, length, null, or one an engine version adds) means
// generation continues, and then choices[0].disaggregated_params must be an
// object with a ctx_request_id.
func (*Adapter) ParseContextResponse(in protocol.Input, body []byte) (protocol.Context, error) {
	if err := in.Validate(); err != nil {
		return protocol.Context{}, fmt.Errorf("%s: %w", Name, err)
	}
	p, err := wire.ParseContext(Name, in.Endpoint, body)
	if err != nil {
		return protocol.Context{}, err
	}
	ctx := p.Context
	if openai.EndsAtFirstToken(ctx.FinishReason) {
		ctx.Finished = true
		return ctx, nil
	}
	bad := func(reason string) error {
		return &protocol.ContextResponseError{Adapter: Name, Reason: reason}
	}
	if p.ChoiceParams == nil {
		return protocol.Context{}, bad(fmt.Sprintf("finish_reason %q without disaggregated_params", ctx.FinishReason))
	}
	ctxRequestID, err := wire.Member(p.ChoiceParams, keyCtxRequestID)
	if err != nil {
		return protocol.Context{}, bad("disaggregated_params is not an object")
	}
	if wire.IsNull(ctxRequestID) {
		return protocol.Context{}, bad("disaggregated_params has no ctx_request_id")
	}
	ctx.Handle = p.ChoiceParams
	return ctx, nil
}

// GenerationRequest returns the generation-only request: the client's body
// with disaggregated_params = the handle, whose request_type,
// disagg_request_id, conversation_id and ctx_usage are overridden (the
// latter two removed when empty) and whose other fields are kept as is.
// For completions the prompt becomes ctx.PromptTokenIDs (or, when the
// context response had none, in.PromptTokenIDs), for chat prompt_token_ids
// is added; without either the body keeps its prompt.
func (*Adapter) GenerationRequest(in protocol.Input, ctx protocol.Context) (protocol.Request, error) {
	if ctx.Finished {
		return protocol.Request{}, fmt.Errorf("%s: %w: context finished the request, nothing to generate", Name, protocol.ErrBadInput)
	}
	if wire.IsNull(ctx.Handle) {
		return protocol.Request{}, fmt.Errorf("%s: %w: context has no handle", Name, protocol.ErrBadInput)
	}
	if !wire.IsNull(ctx.Usage) && !wire.ValidObject(ctx.Usage) {
		return protocol.Request{}, fmt.Errorf("%s: %w: context usage is not a JSON object", Name, protocol.ErrBadInput)
	}
	if !wire.IsNull(ctx.PromptTokenIDs) && !wire.IsArray(ctx.PromptTokenIDs) {
		return protocol.Request{}, fmt.Errorf("%s: %w: context prompt_token_ids is not an array", Name, protocol.ErrBadInput)
	}
	body, err := wire.ClientBody(Name, in)
	if err != nil {
		return protocol.Request{}, err
	}
	body.Delete(keyNVExt)
	params, err := wire.DecodeObjectNoCopy(ctx.Handle) // encoded before return
	if err != nil {
		return protocol.Request{}, fmt.Errorf("%s: %w: handle: %w", Name, protocol.ErrBadInput, err)
	}
	params.Set(keyRequestType, wire.String(disagg.RequestGenerationOnly))
	params.Set(keyDisaggRequestID, wire.Uint(in.RequestID))
	setOrDelete(&params, keyConversationID, in.ConversationID != "", wire.String(in.ConversationID))
	setOrDelete(&params, keyCtxUsage, !wire.IsNull(ctx.Usage), ctx.Usage)
	body.Set(disagg.FieldDisaggregatedParams, params.Encode())
	ids := ctx.PromptTokenIDs
	if wire.IsNull(ids) {
		ids = in.PromptTokenIDs
	}
	if !wire.IsNull(ids) {
		body.Set(promptKey(in.Endpoint), ids)
	}
	return protocol.Request{Body: body.Encode()}, nil
}

// promptKey is where a prompt given as token ids goes: prompt_token_ids
// in a chat body, prompt in a completions body.
func promptKey(e protocol.Endpoint) string {
	if e == protocol.EndpointCompletions {
		return keyPrompt
	}
	return keyPromptTokenIDs
}

// setOrDelete sets key to raw when set is true, else removes it.
func setOrDelete(o *wire.Object, key string, set bool, raw []byte) {
	if set {
		o.Set(key, raw)
		return
	}
	o.Delete(key)
}

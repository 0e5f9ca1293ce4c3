package protocol

import (
	"encoding/json"

	"github.com/duet-serve/duet/proto/disagg"
)

// Adapter turns one request attempt into worker requests for one engine
// family and reads the ctx worker's answer. Implementations are pure and
// stateless: they do no I/O, keep nothing between calls and are safe for
// concurrent use. They never modify or retain the byte slices they are
// given. Methods that use in validate it (Input.Validate); an unusable in
// or Context gives an error wrapping ErrBadInput.
type Adapter interface {
	// Name returns the adapter's configuration name ("trtllm", "vllm",
	// "sglang").
	Name() string

	// Concurrent reports whether the two legs are sent at the same time
	// (SGLang) rather than context first. When true, the caller sends
	// ContextRequest and GenerationRequest(in, Context{}) together, relays
	// the gen response, drains the ctx response and need not call
	// ParseContextResponse.
	Concurrent() bool

	// PortableHandle reports whether any gen worker may redeem a context
	// phase's KV handle: the handle names the ctx worker, which keeps the
	// KV until it is pulled. A generation request that never reached its
	// worker may then go to another one unchanged, without a second
	// prefill.
	PortableHandle() bool

	// ContinuesFinalMessage reports whether the engine's chat endpoint
	// continues a final assistant message (continue_final_message): a
	// migrated answer is then continued by text. When false, the
	// continuation's prompt is sent as token ids (Input.PromptTokenIDs).
	ContinuesFinalMessage() bool

	// ContextRequest returns the request for the ctx worker. It is always a
	// non-streaming request except on a Concurrent adapter, whose two legs
	// carry the client's own stream setting.
	ContextRequest(in Input) (Request, error)

	// ParseContextResponse reads the body of a 2xx ctx response (the caller
	// handles other statuses). A body that breaks the protocol (not JSON,
	// not exactly one choice, no handle where one is required, or a
	// finish_reason that says the engine gave up: abort, cancelled, error,
	// timeout) yields an error wrapping
	// ErrBadContextResponse: the ctx worker failed and the attempt may be
	// retried on another one. The returned Context does not alias body: the
	// caller may reuse body after return.
	ParseContextResponse(in Input, body []byte) (Context, error)

	// GenerationRequest returns the request for the gen worker. ctx is what
	// ParseContextResponse returned for the same in, and must not be
	// Finished; a Concurrent adapter ignores ctx (pass Context{}).
	GenerationRequest(in Input, ctx Context) (Request, error)
}

// Request is what to send to one worker: a POST of Body to the worker's
// in.Endpoint.Path(). Body is newly allocated and owned by the caller.
type Request struct {
	// Body is the JSON request body.
	Body []byte
	// Headers are the extra headers the engine needs, in order; nil when
	// none. The caller sets Content-Type, Host and its own headers.
	Headers []Header
}

// Header is one HTTP request header.
type Header struct {
	// Name is the canonical header name, e.g. "X-Request-Id".
	Name string
	// Value is the header value.
	Value string
}

// Context is what the context phase produced, read from the ctx worker's
// response. Raw fields are copies of the engine's bytes; callers relay them
// and never decode them. A Concurrent adapter returns the zero Context.
// Pass a Context on as ParseContextResponse returned it: GenerationRequest
// re-checks Handle and Usage but, for speed, checks only that
// PromptTokenIDs starts like an array.
type Context struct {
	// Handle is the KV transfer handle (TensorRT-LLM's
	// choices[0].disaggregated_params, vLLM's kv_transfer_params). Nil when
	// Finished, and for vLLM when the prefill returned no params (the gen
	// worker then prefills locally).
	Handle disagg.Handle
	// PromptTokenIDs is TensorRT-LLM's top-level prompt_token_ids (a JSON
	// array); nil when absent.
	PromptTokenIDs json.RawMessage
	// Usage is the ctx response's usage object; nil when absent.
	Usage json.RawMessage
	// PromptTokens, CachedTokens and CompletionTokens are read from Usage
	// (prompt_tokens, prompt_tokens_details.cached_tokens,
	// completion_tokens); 0 when not reported.
	PromptTokens, CachedTokens, CompletionTokens int
	// CachedReported is true when Usage has prompt_tokens_details (not
	// every engine reports cached tokens).
	CachedReported bool
	// FinishReason is choices[0].finish_reason as the engine wrote it ("" when
	// null or absent). It is an engine's value (length, not_finished,
	// remote_decode, ...), not necessarily an OpenAI one: only a Finished
	// context's reason (stop or content_filter, see openai.EndsAtFirstToken)
	// reaches a client.
	FinishReason string
	// Finished reports that the ctx worker completed the whole request (an
	// end of sequence at the first token, openai.EndsAtFirstToken; see each
	// adapter for when a handle is also present). There is no generation
	// phase: the caller must return Text to the client, in the form the
	// client asked for (streamed or not), with FinishReason and Usage.
	Finished bool
	// Text is the content of the choice: the chat message content (text
	// parts joined) or the completion text. The caller needs it only when
	// Finished.
	Text string
	// ResponseID, Model and Created are the ctx response's id, model and
	// created fields, for building the client's response when Finished.
	ResponseID string
	Model      string
	Created    int64
}

// MaxCacheTokens bounds a believable KV cache size (2^50 tokens): a
// CacheSizeReporter rejects more, so that a garbled value cannot overflow
// a product.
const MaxCacheTokens = 1 << 50

// CacheSizeReporter is implemented by the adapters of engines that report
// their KV cache size over HTTP, which the fleet reads when a worker comes
// up so that the router sizes its cache model by it.
type CacheSizeReporter interface {
	// CacheSizePath is the path to GET for the size.
	CacheSizePath() string
	// ParseCacheSize returns the size in tokens, in (0, MaxCacheTokens],
	// from the 200 body of that GET, or an error saying why the body holds
	// none.
	ParseCacheSize(body []byte) (int64, error)
	// ParseBlockSize returns the engine's KV block size in tokens from the
	// same body, 0 when the body does not say.
	ParseBlockSize(body []byte) int
}

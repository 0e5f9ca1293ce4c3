package openai

import "encoding/json"

// Object names used in responses.
const (
	ObjectChatCompletion      = "chat.completion"
	ObjectChatCompletionChunk = "chat.completion.chunk"
	ObjectTextCompletion      = "text_completion"
	ObjectList                = "list"
	ObjectModel               = "model"
)

// Finish reasons. NotFinished is TensorRT-LLM's reason on a context-only
// response whose generation continues on a gen worker.
const (
	FinishStop        = "stop"
	FinishLength      = "length"
	FinishNotFinished = "not_finished"
)

// openAIFinishReasons are the finish reasons OpenAI defines.
var openAIFinishReasons = map[string]bool{FinishStop: true, FinishLength: true, "tool_calls": true, "content_filter": true, "function_call": true}

// failureFinishReasons are the reasons OpenAI-compatible engines give when
// they gave up on a request (vLLM's abort and error, TensorRT-LLM's
// cancelled and timeout): the answer is incomplete.
var failureFinishReasons = map[string]bool{"abort": true, "error": true, "cancelled": true, "timeout": true}

// IsOpenAIFinishReason reports whether reason is one OpenAI defines (stop,
// length, tool_calls, content_filter, function_call); clients know no
// other.
func IsOpenAIFinishReason(reason string) bool { return openAIFinishReasons[reason] }

// IsFailureFinishReason reports whether an engine's reason says it gave up
// on the request (abort, error, cancelled, timeout).
func IsFailureFinishReason(reason string) bool { return failureFinishReasons[reason] }

// EndsAtFirstToken reports whether a context-only (one-token) response's
// reason means the model ended the request there: an end of sequence or
// stop string (stop) or a content filter. tool_calls is not one: a tool
// call cannot be complete in one token, and duet's answer from the context
// phase carries text only.
func EndsAtFirstToken(reason string) bool { return reason == FinishStop || reason == "content_filter" }

// Usage is a response's token accounting.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails reports how many prompt tokens were served from cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CachedTokens returns the cached prompt tokens, 0 when not reported.
func (u *Usage) CachedTokens() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// ChatResponse is a non-streaming chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
	// PromptTokenIDs is returned by TensorRT-LLM context-only responses.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	// KVTransferParams is returned by vLLM prefill responses; opaque.
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one choice of a ChatResponse.
type ChatChoice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
	// DisaggregatedParams is TensorRT-LLM's KV transfer handle; opaque.
	DisaggregatedParams json.RawMessage `json:"disaggregated_params,omitempty"`
}

// CompletionResponse is a non-streaming text completion.
type CompletionResponse struct {
	ID               string             `json:"id"`
	Object           string             `json:"object"`
	Created          int64              `json:"created"`
	Model            string             `json:"model"`
	Choices          []CompletionChoice `json:"choices"`
	Usage            *Usage             `json:"usage,omitempty"`
	PromptTokenIDs   []int              `json:"prompt_token_ids,omitempty"`
	KVTransferParams json.RawMessage    `json:"kv_transfer_params,omitempty"`
}

// CompletionChoice is one choice of a CompletionResponse or CompletionChunk.
type CompletionChoice struct {
	Index               int             `json:"index"`
	Text                string          `json:"text"`
	FinishReason        *string         `json:"finish_reason"`
	Logprobs            any             `json:"logprobs"`
	DisaggregatedParams json.RawMessage `json:"disaggregated_params,omitempty"`
}

// ChatChunk is one streamed chat event (object chat.completion.chunk).
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// ChatChunkChoice is one choice of a ChatChunk.
type ChatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
}

// Delta is the incremental message of a chat chunk.
type Delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// CompletionChunk is one streamed text completion event (object
// text_completion).
type CompletionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Parent is a LoRA adapter's base model, as vLLM lists adapters
	// (absent for a base model).
	Parent string `json:"parent,omitempty"`
}

// ModelList is the GET /v1/models body.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// NewModelList lists the given model ids, owned by owner.
func NewModelList(owner string, created int64, ids ...string) ModelList {
	l := ModelList{Object: ObjectList, Data: make([]Model, len(ids))}
	for i, id := range ids {
		l.Data[i] = Model{ID: id, Object: ObjectModel, Created: created, OwnedBy: owner}
	}
	return l
}

// Ptr returns a pointer to v; handy for optional fields.
func Ptr[T any](v T) *T { return &v }

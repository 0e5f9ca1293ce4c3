// Package trtllm is the protocol adapter for TensorRT-LLM's trtllm-serve
// workers, context first (PROTOCOLS.md §1).
//
// The context request is the client's body with disaggregated_params
// {request_type: "context_only", disagg_request_id, conversation_id},
// stream false and stream_options null. The ctx response's
// choices[0].disaggregated_params is the handle. The generation request is
// the client's body (its own stream, stream_options and max_tokens) plus
// that handle with request_type "generation_only", the same
// disagg_request_id and conversation_id, and ctx_usage set to the ctx
// response's usage; a completions prompt is replaced by the ctx response's
// prompt_token_ids, a chat request gets prompt_token_ids added.
//
// The handle is rewritten as an object of raw values: only the keys duet
// owns change, and engine fields such as the 64-bit ctx_request_id are
// relayed byte for byte.
//
// # Concurrency
//
// Adapter is stateless and safe for concurrent use.
package trtllm

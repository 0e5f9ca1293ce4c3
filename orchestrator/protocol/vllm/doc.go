// Package vllm is the protocol adapter for vLLM workers running the
// NixlConnector, context first (PROTOCOLS.md §2).
//
// The prefill request is the client's body with kv_transfer_params
// {do_remote_decode: true, do_remote_prefill: false, remote_*: null},
// stream false, max_tokens 1 (and max_completion_tokens 1 when the client
// set it), without stream_options and min_tokens. The prefill response's
// top-level kv_transfer_params is the handle, relayed verbatim as the
// decode request's kv_transfer_params; the decode request is otherwise the
// client's body. Both legs carry the same X-Request-Id header.
//
// # Concurrency
//
// Adapter is stateless and safe for concurrent use.
package vllm

// Package openai holds the OpenAI wire types duet speaks to clients and to
// engine workers: chat and text completion requests and responses, streaming
// chunks, usage, the error body and the model list, plus the SSE framing and
// a body rewriter that overrides only the keys duet owns.
//
// Engine-specific fields (TensorRT-LLM's disaggregated_params, vLLM's
// kv_transfer_params) appear here only as json.RawMessage so that they are
// relayed byte for byte; their typed forms live in proto/disagg.
package openai

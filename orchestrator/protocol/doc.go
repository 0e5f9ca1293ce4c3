// Package protocol is the contract between the orchestrator and the engine
// protocol adapters: how one request attempt is turned into the bodies sent
// to a context (ctx) worker and a generation (gen) worker, and how the ctx
// worker's answer is read back.
//
// An Adapter is pure: bytes in, bytes out. It does no I/O, reads no clock,
// draws no random numbers and keeps no per-request state. Everything that
// varies per attempt (the disagg request id, the session key, the chosen ctx
// worker, SGLang's bootstrap room) arrives in an Input that the orchestrator
// fills. The orchestrator does the HTTP calls, timing, retries and fallback.
//
// Two shapes of exchange exist:
//
//   - context first (TensorRT-LLM, vLLM; Concurrent reports false): send
//     ContextRequest to the ctx worker without streaming, hand its 2xx body to
//     ParseContextResponse, then, unless the Context is Finished, send
//     GenerationRequest(in, ctx) to the gen worker and relay its response;
//   - concurrent (SGLang; Concurrent reports true): send ContextRequest and
//     GenerationRequest(in, Context{}) at the same time; relay the gen
//     response and drain the ctx response.
//
// Engine-produced values (the KV transfer Handle, prompt token ids, usage)
// are carried as raw JSON and written back byte for byte, so 64-bit integers
// such as TensorRT-LLM's ctx_request_id survive exactly. When an adapter
// rewrites a body or a handle it overrides only the keys duet owns; every
// other field the client or the engine sent is kept.
//
// The implementations live in the subpackages trtllm, vllm and sglang;
// package adapters selects one by its configured name.
//
// # Engine behaviour
//
// What each engine really answers was read from its source
// (docs/engines.md, "Engine compatibility", lists the files and versions). The rules that
// follow from it: the handle, not the finish reason, decides whether the
// generation phase runs (vLLM answers a prefill with length, llm-d's
// simulator with remote_decode, newer vLLM with stop plus a handle); only an
// end of sequence at the first token (stop, tool_calls, content_filter)
// finishes a request at the context phase, and for TensorRT-LLM it does so
// even with a handle, because its generation phase would continue after
// first_gen_tokens; the engine's own failure reasons (abort, error,
// cancelled, timeout) are ctx worker failures; a null finish reason is
// legal. Handles are relayed byte for byte and never typed: their keys and
// nesting change between engine versions.
//
// # Concurrency
//
// Adapters are stateless and safe for concurrent use. Nothing in these
// packages starts a goroutine.
package protocol

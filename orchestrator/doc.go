// Package orchestrator is duet's request pipeline: it validates a client
// request, finds its session key, tokenizes it, routes it to a (ctx, gen)
// worker pair, runs the context phase and the generation phase through a
// protocol adapter, relays the answer, retries worker failures, and refunds
// every lease on every path. It owns the upstream HTTP client, duet's
// Prometheus metrics and the access log.
//
// The frontend (orchestrator/frontend) turns a Response into HTTP; nothing
// here knows about the client connection except the buffered writer a
// streaming Response relays into.
//
// Concurrency: an Orchestrator is safe for concurrent use. Handle runs on
// the caller's goroutine. A streaming generation starts one reader
// goroutine for the upstream stream when it opens (during Handle); the
// Response's Relay or Close joins it. A timed-out upstream call leaves one
// goroutine that ends when the call does (bounded by the stream's total
// timeout) and releases its response. An SGLang prefill leg runs in a
// goroutine bounded by context_timeout; Close joins them all.
package orchestrator

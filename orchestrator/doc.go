// Package orchestrator is duet's request pipeline: it validates a client
// request, finds its session key, tokenizes it, routes it to a (ctx, gen)
// worker pair, runs the context phase and the generation phase through a
// protocol adapter, relays the answer, retries worker failures, continues
// a stream whose gen worker failed on another one, and refunds every lease
// on every path. It owns the upstream HTTP client, duet's
// Prometheus metrics and the access log.
//
// The frontend (orchestrator/frontend) turns a Response into HTTP; nothing
// here knows about the client connection except the buffered writer a
// streaming Response relays into.
//
// Concurrency: an Orchestrator is safe for concurrent use. Handle runs on
// the caller's goroutine, and so does every upstream call: each runs on a
// pooled connection with deadlines, which the request's cancellation or
// its worker being found down closes (exchange.go), so no call leaves a
// goroutine behind. A streaming generation starts one reader goroutine per
// upstream stream (one per leg when the stream migrates to another worker,
// migrate.go); the Response's Relay or Close joins it. An SGLang prefill
// leg runs in a goroutine bounded by context_timeout; Close joins them
// all.
package orchestrator

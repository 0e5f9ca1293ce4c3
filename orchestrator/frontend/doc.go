// Package frontend is duet's HTTP server: the OpenAI routes, the SSE writer,
// request ids, size limits, and the operational endpoints (/health,
// /version, /metrics, /cluster_info). It turns orchestrator responses and
// errors into HTTP and is the only package that serves HTTP.
//
// Concurrency: fasthttp runs each connection on its own goroutine. A
// streaming response is written by fasthttp's body stream writer after the
// handler returns; everything it needs is copied out of the RequestCtx
// first. Serve owns the server goroutine and joins it on shutdown.
package frontend

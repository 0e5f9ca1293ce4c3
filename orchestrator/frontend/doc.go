// Package frontend is duet's HTTP server: the OpenAI routes, the SSE writer,
// request ids, size limits, and the operational endpoints (/health,
// /version, /metrics, /cluster_info). It turns orchestrator responses and
// errors into HTTP and is the only package that serves HTTP.
//
// Concurrency: fasthttp runs each connection on its own goroutine. A
// streaming response is a body (eventStream) that fasthttp writes on that
// goroutine after the handler returns; everything it needs is copied out
// of the RequestCtx first. A goroutine per request watches the client's
// socket until the answer is written (watchClient). Serve owns the server
// goroutine and joins it on shutdown.
package frontend

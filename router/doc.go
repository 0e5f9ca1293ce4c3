// Package router decides which workers serve a request: it keeps the pool of
// workers as the router sees them (Endpoint, Pool), charges and refunds
// token-weighted load (Lease), and picks a (ctx, gen) worker pair by policy.
//
// Concurrency: Pool is safe for concurrent use; membership changes swap
// copy-on-write snapshots under a mutex, so routing reads never block on a
// sync. An Endpoint's load, in-flight count and health are atomics. A Lease
// is released at most once, from any goroutine.
package router

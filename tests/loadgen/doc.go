// Package loadgen is duet's aiperf-compatible multi-turn load generator, the
// library behind `duet bench`.
//
// It builds a workload (synthetic multi-turn sessions cut from an embedded
// public-domain corpus, or aiperf's multi_turn, single_turn and
// mooncake_trace JSONL files), drives it against an OpenAI-compatible server
// with aiperf's load modes (session concurrency, request rate with poisson or
// constant arrivals, user-centric rate, fixed schedule), measures every
// request the way aiperf defines its metrics, and writes aiperf's export
// files (profile_export_aiperf.json, profile_export_aiperf.csv,
// profile_export.jsonl, inputs.json) plus an offline HTML report.
//
// Beyond aiperf it reports what conversation routing is for: TTFT by turn
// index, the prompt and cached tokens the server reports per turn, the
// cache hit ratio, and the oracle hit ratio: the share of prompt tokens an
// ideal router with an unlimited cache could have reused (the longest
// block-aligned token prefix shared with any earlier prompt of the run).
//
// # Measurements
//
// A request's clock starts when its body has been written to the
// connection. TTFT is the arrival of the first SSE chunk with non-empty
// content (a role-only chunk does not count); request latency is the arrival
// of the last content chunk; ITL = (latency - TTFT) / (output tokens - 1)
// with output tokens from the server's usage. A stream that ends without
// [DONE] and without a finish_reason, an in-stream error event and a non-2xx
// status are errors, counted by type.
//
// # Concurrency
//
// Run starts one goroutine per session in flight, plus a feeder per phase, a
// credit dispatcher in request-rate mode and one goroutine per user in
// user-centric mode; all of them are joined before Run returns, and
// cancelling Run's context stops them. Records, the oracle index and the
// session counters are each guarded by their own mutex or are atomics. A
// Client is safe for concurrent use; Corpus, Oracle and Summary values are
// safe for concurrent reads once built.
//
// # Time
//
// A run reads one clock, Options.Now and Options.AfterFunc (the real clock
// by default), for its schedules (request-rate arrivals, think times,
// user-centric beats, fixed-schedule timestamps), its duration and grace
// period, and the times in its records. The package's tests run whole
// benchmarks on a fake clock and assert exact send times.
package loadgen

// Package model is the simulated worker's pure model of an engine: the paged
// KV cache with prefix reuse (KVCache, whose Observer sees its block events)
// and the timing of prefill, decode and KV transfer (Timing, PrefillQueue).
// `duet sim` serves it over HTTP in real time; `duet replay` runs it in
// simulated time. It does no I/O and reads no clock: callers pass the time
// in.
package model

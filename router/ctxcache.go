package router

// The conversation policy's model of each ctx worker's KV cache. A worker
// evicts the least recently used blocks when it must allocate, so a
// session's prefix is still there while fewer tokens than the cache holds
// were touched after it: every token the worker computed since, and the
// cached tokens other requests found there if those had last been touched
// before the prefix. The router does not know which; it counts half of
// them, the share that measured best (ctxCachedShare). The count is the
// worker's cache clock (Endpoint.CacheClock), booked when each context
// phase ends (touched); a session's ctxMark is a reading of it.

// ctxCachedShare: the clock counts one cached token in ctxCachedShare.
// Measured on the routing benchmark's workload with 32k-token ctx caches,
// replayed over seeds 1-32 (medians of turn >= 1 TTFT p50 / p99 and hit
// ratio): counting no cached token gave 39.0 / 586.8 ms, 0.645; 3 in 10
// 41.0 / 516.1, 0.649; 4 in 10 42.8 / 514.2, 0.644; half 46.8 / 476.5,
// 0.636; 6 in 10 53.1 / 460.0, 0.626; all 178.9 / 403.4, 0.543 (least-load:
// 244.9 / 506.8 ms; the model before, a clock of computed tokens read when
// requests ended and a cache less the KV in flight, 49.2 / 509.5, 0.626).
// On the Mooncake trace, half left the whole hour's hit ratio where it was
// (0.110 with ids, 0.111 without).
const ctxCachedShare = 2

// touched is what a context phase that computed computed tokens and found
// cached tokens cached moves its worker's cache clock by.
func touched(computed, cached int) int64 {
	return int64(computed) + int64(cached)/ctxCachedShare
}

// survival is the share of a prefix of held tokens, which a worker with a
// cache of capacity tokens last touched since tokens ago (on its cache
// clock), expected to be in the cache still: all of it while the tokens
// touched since leave room for it, then less, none at a whole cache's
// worth: (capacity - since) / held, within [0, 1].
func survival(since, capacity int64, held int) float64 {
	return min(max(float64(capacity-since)/float64(max(held, 1)), 0), 1)
}

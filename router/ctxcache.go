package router

// ctxCaches is the conversation policy's model of each ctx worker's KV
// cache, built from this replica's traffic. A worker evicts the least
// recently used blocks when it must allocate, so a session's prefix is
// still there while fewer tokens than the cache holds were touched after
// it: every token the worker computed since, and the cached tokens other
// requests found there if those had last been touched before the prefix.
// The router does not know which; it counts half of them, the share that
// measured best (ctxCachedShare).
type ctxCaches map[string]*ctxCache

// ctxCache is one ctx worker's model.
type ctxCache struct {
	// touched counts the prompt tokens the worker computed plus
	// 1/ctxCachedShare of those it found cached, booked when each context
	// phase ended: the cache's clock (a session's ctxMark is a reading).
	touched int64
	// inFlight counts the prompt tokens of the requests routed there and
	// not yet done, so that a removed worker's model stays until they are.
	inFlight int64
}

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

// of returns id's model, adding it on first use.
func (m ctxCaches) of(id string) *ctxCache {
	w := m[id]
	if w == nil {
		w = &ctxCache{}
		m[id] = w
	}
	return w
}

// clock returns worker id's clock: the tokens touched there so far.
func (m ctxCaches) clock(id string) int64 {
	if w := m[id]; w != nil {
		return w.touched
	}
	return 0
}

// since returns the tokens touched on worker id since its clock read mark
// (never less than 0).
func (m ctxCaches) since(id string, mark int64) int64 { return max(m.clock(id)-mark, 0) }

// routed books a request of promptTokens routed to worker id.
func (m ctxCaches) routed(id string, promptTokens int) { m.of(id).inFlight += int64(promptTokens) }

// prefilled books a context phase that ended on worker id, which computed
// computed tokens and found cached tokens there.
func (m ctxCaches) prefilled(id string, computed, cached int) {
	m.of(id).touched += int64(computed) + int64(cached)/ctxCachedShare
}

// finished books the end of a request of promptTokens that routed was told
// of.
func (m ctxCaches) finished(id string, promptTokens int) {
	if w := m[id]; w != nil { // nil: never booked, a bug elsewhere, not worth a panic
		w.inFlight -= int64(promptTokens)
	}
}

// survival is the share of a prefix of held tokens, which worker id
// touched last when its clock read mark, expected to be in its cache of
// capacity tokens still: all of it while the tokens touched since leave
// room for it, then less, none at a whole cache's worth:
// (capacity - touched since) / held, within [0, 1].
func (m ctxCaches) survival(id string, mark, capacity int64, held int) float64 {
	return min(max(float64(capacity-m.since(id, mark))/float64(max(held, 1)), 0), 1)
}

// keep drops the workers not present once nothing routed to them is in
// flight (a later keep drops those that still had some): until then their
// requests are booked where they began, also if a worker comes back under
// the same ID.
func (m ctxCaches) keep(present map[string]bool) {
	for id, w := range m {
		if !present[id] && w.inFlight == 0 {
			delete(m, id)
		}
	}
}

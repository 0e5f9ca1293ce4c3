package router

// ctxCaches is the conversation policy's model of each ctx worker's KV
// cache, built from this replica's traffic. A worker evicts least recently
// used blocks when it must allocate, so what decides whether a session's
// prefix is still there is how many tokens the worker computed (allocated)
// since it wrote them, against its capacity less the KV that requests in
// flight pin there. The model keeps both per worker.
type ctxCaches map[string]*ctxCache

// ctxCache is one ctx worker's model.
type ctxCache struct {
	// computed counts the prompt tokens the worker computed, and so wrote
	// to its cache: the cache's clock (a session's ctxMark is a reading).
	computed int64
	// inFlight counts the prompt tokens of the requests routed there and
	// not yet done: the KV they pin. A context phase's KV stays until the
	// gen worker pulls it; the router does not see that moment and counts
	// it until the request ends, which overstates it by the decode time.
	inFlight int64
	// peak is inFlight's recent peak, fading by 1/kvPeakFade (at least a
	// token) with each request routed there: what a session away for a
	// while has to reckon with, rather than the pinned KV at this instant.
	peak int64
}

// kvPeakFade sets how fast the in-flight peak fades: by 1/128 per request
// routed to the worker, so it spans about the last hundred requests there.
// Measured on the routing benchmark's workload with 32k-token ctx caches,
// replayed over seeds 1-32 (medians of turn >= 1 TTFT p50 / p99, on the
// experiment's build): 1/64 gave 47.0 / 537.5 ms, 1/128 47.0 / 516.4, 1/256
// 50.1 / 512.2; the Mooncake windows' median hit ratio did not move.
const kvPeakFade = 128

// of returns id's model, adding it on first use.
func (m ctxCaches) of(id string) *ctxCache {
	w := m[id]
	if w == nil {
		w = &ctxCache{}
		m[id] = w
	}
	return w
}

// clock returns the tokens worker id has computed so far.
func (m ctxCaches) clock(id string) int64 {
	if w := m[id]; w != nil {
		return w.computed
	}
	return 0
}

// since returns the tokens worker id has computed since its clock read
// mark (never less than 0).
func (m ctxCaches) since(id string, mark int64) int64 { return max(m.clock(id)-mark, 0) }

// routed books a request of promptTokens routed to worker id.
func (m ctxCaches) routed(id string, promptTokens int) {
	w := m.of(id)
	w.inFlight += int64(promptTokens)
	w.peak = max(w.peak-(w.peak+kvPeakFade-1)/kvPeakFade, w.inFlight)
}

// finished books the end of a request that routed was told of, which
// computed computed tokens on worker id (0 when its context phase did not
// run there).
func (m ctxCaches) finished(id string, promptTokens, computed int) {
	w := m[id]
	if w == nil { // never booked: a bug elsewhere, not worth a panic
		return
	}
	w.inFlight -= int64(promptTokens)
	w.computed += int64(computed)
}

// survival is the share of a prefix that worker id wrote when its clock
// read mark, expected to be in its cache of capacity tokens still. LRU
// keeps it until the tokens computed since fill what the KV in flight
// leaves free, and that KV varies, up to its recent peak: the share is
// (capacity - computed since) / peak, within [0, 1]. It is all of it until
// capacity minus the peak has been computed since, none at a whole cache's
// worth, and less than all from the start when the KV in flight alone can
// fill the cache.
func (m ctxCaches) survival(id string, mark, capacity int64) float64 {
	w := m[id]
	if w == nil {
		return 1
	}
	return min(max(float64(capacity-m.since(id, mark))/float64(max(w.peak, 1)), 0), 1)
}

// keep drops the workers not present once nothing routed to them is in
// flight (a later keep drops those that still had some): until then their
// requests' ends are booked where they began, also if a worker comes back
// under the same ID.
func (m ctxCaches) keep(present map[string]bool) {
	for id, w := range m {
		if !present[id] && w.inFlight == 0 {
			delete(m, id)
		}
	}
}

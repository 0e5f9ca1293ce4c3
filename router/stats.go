package router

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Stats counts routing events that metrics export: affinity breaks by
// reason (ttl, lru, worker_gone, spill, evicted) and spills by reason. Safe
// for concurrent use.
type Stats struct {
	// mu guards both maps.
	mu     sync.Mutex
	breaks map[string]uint64
	spills map[string]uint64
	// fallbacks counts requests routed on local state because the shared
	// store could not answer.
	fallbacks atomic.Uint64
}

func newStats() *Stats { return &Stats{breaks: map[string]uint64{}, spills: map[string]uint64{}} }

func (s *Stats) addBreak(reason string) { s.addBreakN(reason, 1) }

func (s *Stats) addBreakN(reason string, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.breaks[reason] += uint64(n)
	s.mu.Unlock()
}

func (s *Stats) addSpill(reason string) {
	s.mu.Lock()
	s.spills[reason]++
	s.mu.Unlock()
}

// Count is one labelled counter value.
type Count struct {
	Reason string
	Value  uint64
}

// Breaks returns the affinity breaks by reason, sorted by reason.
func (s *Stats) Breaks() []Count { return s.snapshot(s.breaks) }

// Spills returns the spills by reason, sorted by reason.
func (s *Stats) Spills() []Count { return s.snapshot(s.spills) }

func (s *Stats) snapshot(m map[string]uint64) []Count {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts(m)
}

// Counts lists a map of counters as Counts sorted by reason.
func Counts(m map[string]uint64) []Count {
	out := make([]Count, 0, len(m))
	for k, v := range m {
		out = append(out, Count{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Reason < out[j].Reason })
	return out
}

func (s *Stats) addFallback() { s.fallbacks.Add(1) }

// StoreFallbacks counts the requests routed on local state because the
// shared store could not answer (it was down, slow or failing).
func (s *Stats) StoreFallbacks() uint64 { return s.fallbacks.Load() }

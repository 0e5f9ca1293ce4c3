package sim

import (
	"context"
	"errors"
	"github.com/duet-serve/duet/workers/sim/model"
	"sync"
	"sync/atomic"
)

// Admission errors.
var (
	errQueueFull = errors.New("waiting queue is full")
	errTooLarge  = errors.New("request needs more KV blocks than the cache holds")
)

// scheduler admits sequences: at most maxRunning run at once, each holding a
// KV allocation for its prompt plus its maximum output; the rest wait in a
// bounded FIFO queue (head-of-line, like vLLM's FCFS policy). It also holds
// the context side's pinned allocations (see pins.go).
type scheduler struct {
	maxRunning int
	maxWaiting int

	// mu guards kv, waiting, pins and pinAdded, and serialises writes to
	// running.
	mu      sync.Mutex
	kv      *model.KVCache
	waiting []*waiter
	pins    map[string]*pin
	// pinAdded is closed (and set to nil) when a pin is added; takePinWait
	// creates it when it has to wait. Nil while nobody waits.
	pinAdded chan struct{}

	// running is the number of admitted sequences. It is written under mu
	// and read lock-free by decode loops to compute the ITL.
	running atomic.Int64

	// events, when KV events are on, collects the KV cache's events (it is
	// the cache's observer, so mu guards its pending batch); every section
	// under mu that may change the cache ends with unlock, which hands the
	// step's events over. Nil when off.
	events *kvEventSink
}

// admitSpec describes what a sequence needs from the KV cache.
type admitSpec struct {
	hashes      []uint64 // chained hashes of the prompt's full blocks
	maxMatch    int      // most leading blocks that may come from the cache
	totalBlocks int      // blocks for prompt plus maximum output
}

type waiter struct {
	spec  admitSpec
	ready chan struct{} // closed once lease is set
	lease *lease
}

// seqBlocks is what a sequence registers in the KV cache when it commits:
// the chained hashes of its full blocks and its tokens (at least that many
// blocks' worth), which KV events carry, and the LoRA adapter they were
// computed with ("" for the base model; hashes are salted with it, see
// lora.go). The zero value registers nothing.
type seqBlocks struct {
	hashes  []uint64
	tokens  []int
	adapter string
}

// promptBlocks is the job's prompt as seqBlocks.
func (j *job) promptBlocks() seqBlocks {
	return seqBlocks{hashes: j.hashes, tokens: j.prompt, adapter: j.adapter}
}

// lease is one admitted sequence: a running slot and a KV allocation. It
// must end exactly once, by finish or by pin; later calls are no-ops.
type lease struct {
	s     *scheduler
	alloc *model.KVAlloc
	ended bool // guarded by s.mu
}

// newScheduler returns an idle scheduler; events (nil: KV events off)
// becomes its cache's observer.
func newScheduler(cfg Config, events *kvEventSink) *scheduler {
	s := &scheduler{
		maxRunning: cfg.MaxNumSeqs,
		maxWaiting: cfg.MaxWaiting,
		kv:         model.NewKVCache(cfg.KVCapacityBlocks, cfg.BlockSize),
		pins:       make(map[string]*pin),
		events:     events,
	}
	if events != nil {
		s.kv.SetObserver(events)
	}
	return s
}

// unlock ends a scheduler step: it hands the KV events the step produced to
// the publisher (without blocking) and releases mu.
func (s *scheduler) unlock() {
	if s.events != nil {
		s.events.flush()
	}
	s.mu.Unlock()
}

// admit returns a lease once the sequence may run. It fails at once with
// errTooLarge when the cache could never hold the sequence and with
// errQueueFull when it would have to wait behind a full queue; it returns
// ctx.Err() when ctx ends while waiting. It blocks while waiting.
func (s *scheduler) admit(ctx context.Context, spec admitSpec) (*lease, error) {
	s.mu.Lock()
	if spec.totalBlocks > s.kv.Capacity() {
		s.unlock()
		return nil, errTooLarge
	}
	if len(s.waiting) == 0 && int(s.running.Load()) < s.maxRunning {
		if l := s.tryStartLocked(spec); l != nil {
			s.unlock()
			return l, nil
		}
	}
	if len(s.waiting) >= s.maxWaiting {
		s.unlock()
		return nil, errQueueFull
	}
	w := &waiter{spec: spec, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.unlock()

	select {
	case <-w.ready:
		return w.lease, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.unlock()
	if w.lease != nil { // admitted while we gave up
		s.endLocked(w.lease, seqBlocks{})
		return nil, ctx.Err()
	}
	for i, x := range s.waiting {
		if x == w {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			break
		}
	}
	s.dispatchLocked() // the head may have changed
	return nil, ctx.Err()
}

// tryStartLocked allocates and starts a sequence, or returns nil.
func (s *scheduler) tryStartLocked(spec admitSpec) *lease {
	a, ok := s.kv.Allocate(spec.hashes, spec.maxMatch, spec.totalBlocks)
	if !ok {
		return nil
	}
	s.running.Add(1)
	return &lease{s: s, alloc: a}
}

// dispatchLocked starts waiters in FIFO order while slots and blocks allow.
func (s *scheduler) dispatchLocked() {
	for len(s.waiting) > 0 && int(s.running.Load()) < s.maxRunning {
		w := s.waiting[0]
		l := s.tryStartLocked(w.spec)
		if l == nil {
			return
		}
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		w.lease = l
		close(w.ready)
	}
}

// endLocked ends a lease: it registers b (prompt and output blocks; the
// zero value for none), releases the blocks and the running slot, and
// starts waiters.
func (s *scheduler) endLocked(l *lease, b seqBlocks) {
	if l.ended {
		return
	}
	l.ended = true
	s.kv.CommitLoRA(l.alloc, b.hashes, b.tokens, b.adapter)
	s.kv.Release(l.alloc)
	s.running.Add(-1)
	s.dispatchLocked()
}

// matchedBlocks is how many leading blocks of the sequence were cache hits.
func (l *lease) matchedBlocks() int { return l.alloc.Matched() }

// commit registers the sequence's blocks b now, while it keeps running (a
// gen worker registers the prompt once its KV has arrived).
func (l *lease) commit(b seqBlocks) {
	l.s.mu.Lock()
	defer l.s.unlock()
	if !l.ended {
		l.s.kv.CommitLoRA(l.alloc, b.hashes, b.tokens, b.adapter)
	}
}

// finish ends the sequence, registering b (the zero value for none).
func (l *lease) finish(b seqBlocks) {
	l.s.mu.Lock()
	defer l.s.unlock()
	l.s.endLocked(l, b)
}

// resetCache drops every cached block (vLLM's reset_prefix_cache); it fails
// while a sequence runs or a pin holds blocks.
func (s *scheduler) resetCache() bool {
	s.mu.Lock()
	defer s.unlock()
	return s.kv.Reset()
}

// resetCacheSilently drops every cached block no sequence references,
// telling the KV event sink nothing (the reset_cache_silently fault), and
// returns the blocks dropped and the cached blocks that running or pinned
// sequences hold, which stay.
func (s *scheduler) resetCacheSilently() (dropped, kept int) {
	s.mu.Lock()
	defer s.unlock()
	return s.kv.ResetSilently()
}

// schedStats is a snapshot for metrics and tests.
type schedStats struct {
	Running int
	Waiting int
	Pins    int
	KV      model.KVStats
}

func (s *scheduler) stats() schedStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return schedStats{
		Running: int(s.running.Load()),
		Waiting: len(s.waiting),
		Pins:    len(s.pins),
		KV:      s.kv.Stats(),
	}
}

package replay

import (
	"time"

	"github.com/duet-serve/duet/router"
	"github.com/duet-serve/duet/router/kvindex"
	"github.com/duet-serve/duet/workers/sim/model"
)

// WorkerModel is one modelled worker: the simulator's KV cache and timing
// (workers/sim/model), as `duet sim` runs them.
type WorkerModel struct {
	// KVCapacityBlocks and BlockSize size the paged KV cache
	// (sim.kv_capacity_blocks, sim.block_size).
	KVCapacityBlocks, BlockSize int
	// MaxNumSeqs bounds the running sequences (sim.max_num_seqs); more wait
	// in FIFO order, as in the simulator's scheduler.
	MaxNumSeqs int
	// Timing is the prefill, decode and transfer model.
	Timing model.Timing
}

// cacheTokens is the KV cache size the worker reports, in tokens.
func (m WorkerModel) cacheTokens() int64 { return int64(m.KVCapacityBlocks) * int64(m.BlockSize) }

// worker is one modelled engine: its endpoint in the router's pool, its KV
// cache, its prefill server and its admission queue.
type worker struct {
	ep      *router.Endpoint
	m       WorkerModel
	kv      *model.KVCache
	prefill model.PrefillQueue
	running int
	waiting []*admission
	// prefilled counts the uncached prompt tokens this worker computed,
	// in all and per minute of simulated time (for the imbalance).
	prefilled int64
	perMinute map[int64]int64
}

// admission is a sequence waiting for a running slot and KV blocks.
type admission struct {
	hashes   []uint64
	maxMatch int
	blocks   int
	// start runs when the sequence is admitted, with its allocation, at
	// the simulated time of admission.
	start func(a *model.KVAlloc, at time.Time)
}

func newWorker(ep *router.Endpoint, m WorkerModel) *worker {
	return &worker{ep: ep, m: m, kv: model.NewKVCache(m.KVCapacityBlocks, m.BlockSize), perMinute: map[int64]int64{}}
}

// fits reports whether the worker could ever hold a sequence of blocks.
func (w *worker) fits(blocks int) bool { return blocks <= w.kv.Capacity() }

// admit starts the sequence at once when a slot and its blocks are free and
// nobody waits ahead of it; otherwise it waits (FIFO, like the simulator).
func (w *worker) admit(a *admission, now time.Time) {
	if len(w.waiting) == 0 && w.tryStart(a, now) {
		return
	}
	w.waiting = append(w.waiting, a)
}

func (w *worker) tryStart(a *admission, now time.Time) bool {
	if w.running >= w.m.MaxNumSeqs {
		return false
	}
	alloc, ok := w.kv.Allocate(a.hashes, a.maxMatch, a.blocks)
	if !ok {
		return false
	}
	w.running++
	a.start(alloc, now)
	return true
}

// endRunning frees a running slot (the KV blocks may stay, see release).
func (w *worker) endRunning(now time.Time) {
	w.running--
	w.dispatch(now)
}

// release commits hashes (of tokens) to the allocation's blocks and frees
// them.
func (w *worker) release(a *model.KVAlloc, hashes []uint64, tokens []int, now time.Time) {
	w.kv.CommitTokens(a, hashes, tokens)
	w.kv.Release(a)
	w.dispatch(now)
}

// dispatch starts waiters in order while they fit.
func (w *worker) dispatch(now time.Time) {
	for len(w.waiting) > 0 && w.tryStart(w.waiting[0], now) {
		w.waiting[0] = nil
		w.waiting = w.waiting[1:]
	}
}

// countPrefill books tokens prefilled at now.
func (w *worker) countPrefill(tokens int, now time.Time) {
	w.prefilled += int64(tokens)
	w.perMinute[now.Unix()/60] += int64(tokens)
}

// eventFeed is a modelled worker's KV cache events, applied to the
// router's cache index as router/kvfeed applies a live worker's: the same
// kvindex code, fed without the wire.
type eventFeed struct {
	rt *router.Router
	ep *router.Endpoint
}

var _ model.Observer = eventFeed{}

func (f eventFeed) Stored(b model.StoredBlocks) {
	if b.Tokens == nil {
		return
	}
	f.rt.SignalChanged(f.ep, f.rt.Cache(f.ep).Stored(kvindex.Stored{Hashes: b.Hashes, Parent: b.Parent, HasParent: b.HasParent,
		Tokens: b.Tokens, BlockSize: b.BlockSize}))
}

func (f eventFeed) Evicted(hash uint64) { f.rt.Cache(f.ep).Removed([]uint64{hash}) }

func (f eventFeed) Cleared() { f.rt.Cache(f.ep).Cleared() }

package kvindex

import (
	"sync"
)

// Cache is what the router knows of one worker's KV cache: which prompt
// blocks, named by duet's chained block hashes, the worker holds. Two
// views feed it:
//
//   - the estimate: the blocks duet's own requests left there (Sent), in an
//     LRU of the worker's cache size, evicted as the engine evicts (least
//     recently used first, a prompt's tail before its prefix);
//   - the engine's KV events, when the worker publishes them (Stored,
//     Removed, Cleared; events.go): the blocks the engine says it holds.
//
// Match reads the events when the worker publishes them and the watchdog
// trusts them, else the estimate. The watchdog (Observe) compares what
// each view expected with the cached tokens the engine reported for the
// same request, and demotes events that stopped agreeing.
//
// A Cache belongs to one incarnation of a worker: a worker that restarts
// or moves gets a new one (the router's Endpoint owns it), so it is never
// believed warm. Safe for concurrent use.
type Cache struct {
	blockSize, capacity int

	// mu guards everything below.
	mu       sync.Mutex
	estimate *blockLRU
	events   *eventBlocks // nil: the worker publishes no events
	dog      watchdog
	// blockNote says how the worker's blocks differ from the cache's (""
	// when they do not, or it reported none); mismatch is true when they
	// cannot be named by the cache's (neither size divides the other): its
	// events are then never trusted.
	blockNote string
	mismatch  bool
}

// NewCache returns an empty cache of a worker holding capacityBlocks
// blocks of blockSize tokens.
func NewCache(blockSize, capacityBlocks int) *Cache {
	capacityBlocks = max(capacityBlocks, 1)
	return &Cache{blockSize: max(blockSize, 1), capacity: capacityBlocks, estimate: newBlockLRU(capacityBlocks)}
}

// BlockSize is the tokens per block of the hashes the cache is keyed by.
func (c *Cache) BlockSize() int { return c.blockSize }

// Capacity is the cache's size in blocks.
func (c *Cache) Capacity() int { return c.capacity }

// Prediction is how many leading blocks of one prompt each view says the
// worker holds, taken when the request is routed; the watchdog later
// compares it with what the engine reported.
type Prediction struct {
	// Estimate is the estimate's count; Events the events' (-1 when the
	// worker publishes none).
	Estimate, Events int
	// FromEvents is true when Blocks reads the events.
	FromEvents bool
}

// Blocks is the count of the view the router trusts.
func (p Prediction) Blocks() int {
	if p.FromEvents {
		return p.Events
	}
	return p.Estimate
}

// Match returns how many leading blocks of hashes (chained, of BlockSize
// tokens) the worker holds, by each view.
//
// Cost: a binary search per view. A cache holds a block's parent whenever
// it holds the block (a prompt's blocks are touched tail first, so the
// tail is always evicted before its prefix, in the engines as in the
// estimate), so the held blocks of one prompt are a prefix of it.
func (c *Cache) Match(hashes []uint64) Prediction {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := Prediction{Estimate: heldPrefix(hashes, c.estimate.has), Events: -1}
	if c.events != nil {
		p.Events = heldPrefix(hashes, c.events.has)
		p.FromEvents = c.dog.trusted()
	}
	return p
}

// heldPrefix is the number of leading hashes held, for a held set that
// holds a block's parent whenever it holds the block.
func heldPrefix(hashes []uint64, held func(uint64) bool) int {
	lo, hi := 0, len(hashes) // the first lo are held as far as the search knows; none past hi
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if held(hashes[mid-1]) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Sent records that the worker now holds these blocks (a prompt it
// prefilled, or a sequence it decoded): the estimate touches them, the
// tail first so that the prefix is the most recently used.
func (c *Cache) Sent(hashes []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(hashes) - 1; i >= 0; i-- {
		c.estimate.touch(hashes[i])
	}
}

// forgetEstimate empties the estimate: the worker's cache was found
// empty (a restart the router could not see otherwise).
func (c *Cache) forgetEstimate() { c.estimate = newBlockLRU(c.capacity) }

// Held is the number of blocks each view holds (events -1 when none).
func (c *Cache) Held() (estimate, events int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	events = -1
	if c.events != nil {
		events = c.events.len()
	}
	return c.estimate.len(), events
}

package tokenizer

import "sync"

// messageCache is a bounded map from message hash to token ids with CLOCK
// eviction: an entry read since the hand last passed survives one sweep.
// Cached slices are shared and must not be modified by callers.
type messageCache struct {
	// mu guards every field below.
	mu      sync.Mutex
	entries map[uint64]*cacheEntry
	ring    []uint64 // keys in insertion slots; len <= capacity
	hand    int
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	tokens     []int
	referenced bool
}

func newMessageCache(capacity int) *messageCache {
	return &messageCache{entries: make(map[uint64]*cacheEntry, capacity), ring: make([]uint64, 0, capacity)}
}

func (c *messageCache) get(key uint64) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		c.misses++
		return nil, false
	}
	c.hits++
	e.referenced = true
	return e.tokens, true
}

func (c *messageCache) put(key uint64, tokens []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; ok {
		return
	}
	if len(c.ring) < cap(c.ring) {
		c.ring = append(c.ring, key)
	} else {
		c.ring[c.evictSlot()] = key
	}
	c.entries[key] = &cacheEntry{tokens: tokens}
}

// evictSlot advances the hand past referenced entries (clearing their bit),
// removes the first unreferenced one and returns its slot.
func (c *messageCache) evictSlot() int {
	for {
		slot := c.hand
		c.hand = (c.hand + 1) % len(c.ring)
		e := c.entries[c.ring[slot]]
		if e.referenced {
			e.referenced = false
			continue
		}
		delete(c.entries, c.ring[slot])
		return slot
	}
}

func (c *messageCache) stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

func (c *messageCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

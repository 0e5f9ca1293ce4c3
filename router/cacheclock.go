package router

import "sync"

// cacheClock is a worker's KV cache clock: how many tokens were touched in
// its cache so far (the conversation policy's model of the cache, see
// ctxcache.go, is read off it). One duet replica books what its own
// requests touched; with a shared store, every replica's bookings are
// summed there, so that each one reads the whole fleet's traffic and a
// session's mark (a reading) means the same on every replica.
//
// A reading is total + sending + unsent (+ offset): the store's total as
// last seen, what the sync under way carries, and what this replica booked
// since. Readings never go back, also when the store loses its count (a
// Redis restart): offset then keeps them going from where they were. A
// replica's first sync moves its clock on to the fleet's total, so the
// sessions it placed before then (with the store down) look older.
type cacheClock struct {
	mu      sync.Mutex
	offset  int64 // what the store lost, summed
	total   int64 // the store's total at the last sync (0 without a store)
	sending int64 // tokens the sync under way (or one that failed) adds to the store
	unsent  int64 // tokens booked since
}

// read returns the clock.
func (c *cacheClock) read() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset + c.total + c.sending + c.unsent
}

// add books tokens touched (< 0 counts as 0).
func (c *cacheClock) add(tokens int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsent += max(tokens, 0)
}

// CacheClock returns the worker's KV cache clock: the tokens touched in its
// cache so far, by this replica's requests and, with a shared store, every
// replica's as of the last sync. Only differences between readings mean
// anything.
func (e *Endpoint) CacheClock() int64 { return e.clock.read() }

// TouchCache books tokens touched in the worker's KV cache (the
// conversation policy books each context phase when it ends).
func (e *Endpoint) TouchCache(tokens int64) { e.clock.add(tokens) }

// TakeCacheTouches returns the tokens this replica booked on the worker's
// cache clock since the last sync that succeeded, for the shared store to
// add to its total; the store then calls CacheTouchesSynced with the new
// total. After a sync that failed, the next one sends them again (with
// what was booked since). One sync at a time.
func (e *Endpoint) TakeCacheTouches() int64 {
	c := &e.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sending += c.unsent
	c.unsent = 0
	return c.sending
}

// CacheTouchesSynced sets the store's total of the worker's cache clock
// after it added what TakeCacheTouches returned. A total lower than the
// last one plus that means the store lost its count: the clock goes on from
// where it was.
func (e *Endpoint) CacheTouchesSynced(total int64) {
	c := &e.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if want := c.total + c.sending; total < want {
		c.offset += want - total
	}
	c.total, c.sending = total, 0
}

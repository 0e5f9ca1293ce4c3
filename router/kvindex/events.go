package kvindex

import (
	"fmt"

	"github.com/duet-serve/duet/tokenizer"
)

// Stored is one engine event: it stored consecutive blocks of one
// sequence, the engine's BlockStored (proto/kvevents).
type Stored struct {
	// Hashes are the engine's own hashes of the blocks, in sequence order.
	Hashes []uint64
	// Parent is the engine's hash of the block before the first one;
	// HasParent is false when the first block starts a sequence.
	Parent    uint64
	HasParent bool
	// Tokens are the blocks' token ids, BlockSize per block.
	Tokens []int
	// BlockSize is the engine's tokens per block.
	BlockSize int
}

// eventBlocks is the events view: the blocks the engine says it holds.
// Engines name blocks by hashes of their own, so each stored block is named
// again by duet's chained hash of its tokens, chained onto its parent's.
// Its Cache guards it.
type eventBlocks struct {
	// duetOf maps an engine hash to duet's hash of the same block.
	duetOf map[uint64]uint64
	// held counts, per duet hash, the engine blocks that hold it (one per
	// medium a block may be stored in).
	held map[uint64]int32
	// limit bounds duetOf: an engine cannot hold more blocks than its
	// cache, so a stream that claims more is broken.
	limit int
}

func newEventBlocks(capacity int) *eventBlocks {
	return &eventBlocks{duetOf: map[uint64]uint64{}, held: map[uint64]int32{}, limit: 2*capacity + 1024}
}

func (e *eventBlocks) has(h uint64) bool { return e.held[h] > 0 }

func (e *eventBlocks) len() int { return len(e.held) }

// AttachEvents starts the events view: the worker publishes KV events, and
// Match reads them while the watchdog trusts them. It starts empty and
// trusted (a worker's events are read from its start). Attaching twice
// changes nothing.
func (c *Cache) AttachEvents() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events = newEventBlocks(c.capacity)
	}
}

// Stored applies a BlockStored event. A block size other than the
// cache's, tokens that do not fill the blocks, or more blocks than the
// engine's cache can hold demote the events (the returned Change says
// so). A block whose parent the view does not know is skipped: its duet
// hash cannot be computed (its parent's event was lost; the watchdog sees
// the effect).
func (c *Cache) Stored(s Stored) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		return Change{}
	}
	from := c.state()
	switch {
	case s.BlockSize != c.blockSize:
		c.loseEvents(blockSizeReason(s.BlockSize, c.blockSize))
	case len(s.Tokens) != len(s.Hashes)*s.BlockSize:
		c.loseEvents(fmt.Sprintf("a stored-blocks event holds %d tokens for %d blocks of %d", len(s.Tokens), len(s.Hashes), s.BlockSize))
	default:
		c.store(s)
	}
	return c.change(from)
}

func (c *Cache) store(s Stored) {
	e := c.events
	var parent uint64
	if s.HasParent {
		p, ok := e.duetOf[s.Parent]
		if !ok {
			return
		}
		parent = p
	}
	for i, h := range tokenizer.ChainBlockHashes(parent, s.Tokens, s.BlockSize) {
		if _, dup := e.duetOf[s.Hashes[i]]; dup {
			continue
		}
		if len(e.duetOf) >= e.limit {
			c.loseEvents(fmt.Sprintf("its KV events claim more than %d blocks, beyond its cache of %d", e.limit, c.capacity))
			return
		}
		e.duetOf[s.Hashes[i]] = h
		e.held[h]++
	}
}

// BlockSizeMismatch says the worker reported KV blocks of blockSize tokens,
// not the cache's: its events cannot be matched to duet's blocks and are not
// used (the estimate still approximates its cache at duet's block size).
// It returns the change, with the reason set even when the state stays
// (a worker without events), for the caller to say so once.
func (c *Cache) BlockSizeMismatch(blockSize int) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.state()
	c.mismatch = blockSizeReason(blockSize, c.blockSize)
	if c.events != nil {
		c.loseEvents(c.mismatch)
	}
	return Change{From: from, To: c.state(), Reason: c.mismatch}
}

func blockSizeReason(worker, router int) string {
	return fmt.Sprintf("its KV block size is %d tokens, router.tokens_per_block is %d", worker, router)
}

// Removed applies a BlockRemoved event; unknown hashes are ignored.
func (c *Cache) Removed(hashes []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		return
	}
	e := c.events
	for _, eh := range hashes {
		h, ok := e.duetOf[eh]
		if !ok {
			continue
		}
		delete(e.duetOf, eh)
		if e.held[h]--; e.held[h] <= 0 {
			delete(e.held, h)
		}
	}
}

// Cleared applies an AllBlocksCleared event: the engine's cache is empty,
// so both views are.
func (c *Cache) Cleared() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events != nil {
		c.events = newEventBlocks(c.capacity)
	}
	c.forgetEstimate()
}

// Restarted says the engine restarted (its event sequence started over):
// its cache is empty, so both views are.
func (c *Cache) Restarted() { c.Cleared() }

// Lost says events were lost (a sequence gap that could not be replayed,
// a malformed frame, a subscriber that fell behind): the events view is
// emptied and not trusted until it agrees with the engine's reports again.
func (c *Cache) Lost(reason string) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		return Change{}
	}
	from := c.state()
	c.loseEvents(reason)
	return c.change(from)
}

// loseEvents empties the events view and demotes it for reason.
func (c *Cache) loseEvents(reason string) {
	c.events = newEventBlocks(c.capacity)
	c.dog.demote(reason)
}

// change is the Change from state from to now.
func (c *Cache) change(from State) Change {
	ch := Change{From: from, To: c.state()}
	if ch.Changed() {
		ch.Reason = c.dog.demoted
	}
	return ch
}

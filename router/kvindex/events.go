package kvindex

import (
	"fmt"

	"github.com/duet-serve/duet/tokenizer"
	"github.com/duet-serve/duet/tokenizer/blockmap"
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
	// Seed starts duet's chain of a sequence's first block (HasParent
	// false): tokenizer.SaltSeed of the salt its requests were hashed with
	// (a LoRA adapter, a cache salt), 0 for none.
	Seed uint64
}

// eventBlocks is the events view: the blocks the engine says it holds.
// Engines name blocks by hashes of their own, so each stored block is named
// again by duet's chained hashes of its tokens, chained onto its parent's.
// An engine's blocks may be another size than duet's when one divides the
// other (vLLM's 16 against duet's 32, say): an engine block then completes
// the duet blocks whose last token it holds, carrying the tokens of a duet
// block it only starts to its children. Its Cache guards it.
type eventBlocks struct {
	// byEngine maps an engine hash to its block's index in blocks; free
	// lists the indexes of removed blocks, for reuse.
	byEngine *blockmap.Map
	blocks   []engineBlock
	free     []int32
	// held counts, per duet hash, the engine blocks that complete it (one
	// per medium a block may be stored in).
	held *blockmap.Map
	// limit bounds byEngine: an engine cannot hold more blocks than its
	// cache, so a stream that claims more is broken.
	limit int
}

// engineBlock is one engine block in duet's terms.
type engineBlock struct {
	// completes are the duet blocks whose last token this block holds.
	completes []uint64
	// tip is duet's chained hash of the last complete duet block up to and
	// including this block (0: none yet), and carry the tokens after it
	// (fewer than a duet block): where a child's duet blocks start.
	tip   uint64
	carry []int
}

func newEventBlocks(capacity int) *eventBlocks {
	n := min(capacity, 1<<16)
	return &eventBlocks{byEngine: blockmap.New(n), held: blockmap.New(n), limit: 2*capacity + 1024}
}

func (e *eventBlocks) has(h uint64) bool { return e.held.Has(h) }

func (e *eventBlocks) len() int { return e.held.Len() }

// block returns the engine block with hash eh.
func (e *eventBlocks) block(eh uint64) (engineBlock, bool) {
	i, ok := e.byEngine.Get(eh)
	if !ok {
		return engineBlock{}, false
	}
	return e.blocks[i], true
}

// add records engine block eh and counts the duet blocks it completes.
func (e *eventBlocks) add(eh uint64, b engineBlock) {
	var i int32
	if n := len(e.free); n > 0 {
		i, e.free = e.free[n-1], e.free[:n-1]
		e.blocks[i] = b
	} else {
		i = int32(len(e.blocks))
		e.blocks = append(e.blocks, b)
	}
	e.byEngine.Put(eh, i)
	for _, h := range b.completes {
		n, _ := e.held.Get(h)
		e.held.Put(h, n+1)
	}
}

// remove forgets engine block eh and uncounts the duet blocks it
// completed; an unknown hash is ignored.
func (e *eventBlocks) remove(eh uint64) {
	i, ok := e.byEngine.Get(eh)
	if !ok {
		return
	}
	e.byEngine.Delete(eh)
	for _, h := range e.blocks[i].completes {
		if n, _ := e.held.Get(h); n > 1 {
			e.held.Put(h, n-1)
		} else {
			e.held.Delete(h)
		}
	}
	e.blocks[i] = engineBlock{}
	e.free = append(e.free, i)
}

// blockSizesFit reports whether an engine's blocks of engine tokens can be
// named by duet's of duet tokens: one size divides the other.
func blockSizesFit(engine, duet int) bool {
	return engine > 0 && (duet%engine == 0 || engine%duet == 0)
}

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

// Stored applies a BlockStored event. A block size that neither divides
// nor is a multiple of the cache's, tokens that do not fill the blocks, or
// more blocks than the engine's cache can hold demote the events (the
// returned Change says so). A block whose parent the view does not know is skipped: its duet
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
	case !blockSizesFit(s.BlockSize, c.blockSize):
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
	at := engineBlock{tip: s.Seed} // where the first block starts: the sequence's start without a parent
	if s.HasParent {
		parent, ok := e.block(s.Parent)
		if !ok {
			return
		}
		at = parent
	}
	for i, eh := range s.Hashes {
		block := s.Tokens[i*s.BlockSize : (i+1)*s.BlockSize]
		if known, dup := e.block(eh); dup {
			at = known
			continue
		}
		if e.byEngine.Len() >= e.limit {
			c.loseEvents(fmt.Sprintf("its KV events claim more than %d blocks, beyond its cache of %d", e.limit, c.capacity))
			return
		}
		at = e.chain(at, block, c.blockSize)
		e.add(eh, at)
	}
}

// chain returns the engine block holding block (its tokens) after parent:
// the duet blocks of duet tokens it completes and what it carries on.
func (e *eventBlocks) chain(parent engineBlock, block []int, duet int) engineBlock {
	tokens := block
	if len(parent.carry) > 0 {
		tokens = append(append(make([]int, 0, len(parent.carry)+len(block)), parent.carry...), block...)
	}
	next := engineBlock{tip: parent.tip}
	if full := len(tokens) / duet * duet; full > 0 {
		next.completes = tokenizer.ChainBlockHashes(parent.tip, tokens[:full], duet)
		next.tip = next.completes[len(next.completes)-1]
		tokens = tokens[full:]
	}
	if len(tokens) > 0 {
		next.carry = append([]int(nil), tokens...)
	}
	return next
}

// BlockSizeMismatch says the worker reported KV blocks of blockSize tokens,
// not the cache's. When one size does not divide the other its events
// cannot be named by duet's blocks and are not used (the estimate still
// approximates its cache at duet's block size). It returns the change,
// with the reason set even when the state stays (a worker without events,
// or blocks that fit), for the caller to say so once.
func (c *Cache) BlockSizeMismatch(blockSize int) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.state()
	c.blockNote = blockSizeReason(blockSize, c.blockSize)
	c.mismatch = !blockSizesFit(blockSize, c.blockSize)
	if c.events != nil && c.mismatch {
		c.loseEvents(c.blockNote)
	}
	return Change{From: from, To: c.state(), Reason: c.blockNote}
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
	for _, eh := range hashes {
		c.events.remove(eh)
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

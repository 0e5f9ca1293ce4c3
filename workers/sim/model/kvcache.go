package model

import "github.com/duet-serve/duet/tokenizer/blockmap"

// KVCache models a paged KV cache: capacity blocks of blockSize tokens each.
// A block is in one of three states:
//
//   - free: holds nothing;
//   - referenced: used by at least one allocation (refs > 0);
//   - cached: unreferenced but still holding the KV of a known token prefix,
//     findable by its chained block hash and evictable in LRU order.
//
// Allocations reuse cached and referenced blocks whose hashes match the
// prompt's leading block hashes (prefix reuse) and take fresh blocks for the
// rest, evicting the least recently used cached blocks when no free block is
// left. Referenced blocks are never evicted.
//
// An Observer (SetObserver) is told of blocks stored, evicted and cleared,
// the engine's KV cache events.
//
// KVCache is not safe for concurrent use; its owner (the simulated worker's
// scheduler, or duet replay's modelled worker) serialises calls.
type KVCache struct {
	blockSize int
	blocks    []kvBlock
	free      []int32       // ids of free blocks, used as a stack
	byHash    *blockmap.Map // hash -> block id, for blocks holding a known prefix
	lruHead   int32         // least recently used cached block, -1 when none
	lruTail   int32         // most recently used cached block, -1 when none
	lruLen    int
	refBlocks int      // blocks with refs > 0
	obs       Observer // nil: none (see SetObserver)
}

type kvBlock struct {
	hash   uint64
	hashed bool
	refs   int32
	prev   int32 // LRU links while cached; -1 at the ends
	next   int32
}

// KVAlloc is one sequence's blocks: blocks[i] holds the sequence's tokens
// [i*blockSize, (i+1)*blockSize).
type KVAlloc struct {
	blocks    []int32
	matched   int // leading blocks found in the cache at allocation
	committed int // leading blocks registered by commit (>= matched)
	released  bool
}

// NewKVCache returns an empty cache of capacity blocks of blockSize tokens.
func NewKVCache(capacity, blockSize int) *KVCache {
	c := &KVCache{
		blockSize: blockSize,
		blocks:    make([]kvBlock, capacity),
		free:      make([]int32, capacity),
		byHash:    blockmap.New(capacity),
		lruHead:   -1,
		lruTail:   -1,
	}
	for i := range c.free {
		// Pop order hands out block 0 first; purely cosmetic.
		c.free[i] = int32(capacity - 1 - i)
		c.blocks[i].prev, c.blocks[i].next = -1, -1
	}
	return c
}

// Capacity returns the cache size in blocks.
func (c *KVCache) Capacity() int { return len(c.blocks) }

// BlocksFor returns the number of blocks that hold n tokens.
func (c *KVCache) BlocksFor(n int) int { return (n + c.blockSize - 1) / c.blockSize }

// Lookup returns how many leading hashes are held (referenced or cached).
func (c *KVCache) Lookup(hashes []uint64) int {
	for i, h := range hashes {
		if !c.byHash.Has(h) {
			return i
		}
	}
	return len(hashes)
}

// Allocate reserves total blocks for a sequence whose full blocks have the
// given chained hashes: up to maxMatch leading blocks come from the cache,
// the rest are fresh. It returns false and changes nothing when even
// evicting every cached block would not free enough blocks.
func (c *KVCache) Allocate(hashes []uint64, maxMatch, total int) (*KVAlloc, bool) {
	matched := max(0, min(c.Lookup(hashes), maxMatch, total))
	matchedCached := 0 // matched blocks that are unreferenced, hence in the LRU
	for _, h := range hashes[:matched] {
		if id, _ := c.byHash.Get(h); c.blocks[id].refs == 0 {
			matchedCached++
		}
	}
	fresh := total - matched
	if len(c.free)+c.lruLen-matchedCached < fresh {
		return nil, false
	}
	a := &KVAlloc{blocks: make([]int32, 0, total), matched: matched, committed: matched}
	for _, h := range hashes[:matched] {
		id, _ := c.byHash.Get(h)
		c.ref(id)
		a.blocks = append(a.blocks, id)
	}
	for range fresh {
		id := c.take()
		c.ref(id)
		a.blocks = append(a.blocks, id)
	}
	return a, true
}

// Commit registers the allocation's blocks under hashes (the chained hashes
// of the sequence's full blocks, prompt and output), so later sequences with
// the same prefix find them. Hashes beyond the allocation are ignored; a
// hash already held by another block is left to that block. It is
// CommitTokens without tokens: an observer is told of the blocks without
// their tokens.
func (c *KVCache) Commit(a *KVAlloc, hashes []uint64) { c.CommitTokens(a, hashes, nil) }

// CommitTokens is Commit for a sequence whose tokens are known: tokens (at
// least len(hashes) blocks' worth; extra tokens are ignored) are handed to
// the observer with the blocks they fill, as vLLM's BlockStored carries
// them. Each run of consecutive newly registered blocks is one
// Observer.Stored call; the blocks already registered (the cache hits of
// Allocate, an earlier commit) are not reported again.
func (c *KVCache) CommitTokens(a *KVAlloc, hashes []uint64, tokens []int) {
	c.CommitLoRA(a, hashes, tokens, "")
}

// CommitLoRA is CommitTokens for a sequence computed with the LoRA adapter
// lora ("" for the base model): the observer is told the adapter with the
// blocks (StoredBlocks.LoRA), as vLLM's BlockStored carries lora_name. The
// adapter must already be part of hashes (a salted chain): the cache keys
// blocks by hash alone.
func (c *KVCache) CommitLoRA(a *KVAlloc, hashes []uint64, tokens []int, lora string) {
	if a.released {
		return
	}
	n := min(len(hashes), len(a.blocks))
	run := -1 // first block of the current run of registered blocks; -1 when none
	for i := a.committed; i < n; i++ {
		if c.register(a.blocks[i], hashes[i]) {
			if run < 0 {
				run = i
			}
			continue
		}
		if run >= 0 && c.obs != nil {
			c.stored(hashes, tokens, lora, run, i)
		}
		run = -1
	}
	if run >= 0 && c.obs != nil {
		c.stored(hashes, tokens, lora, run, n)
	}
	a.committed = max(a.committed, n)
}

// register gives block id the hash h unless it already has one or another
// block holds h (an identical prefix registered concurrently), and reports
// whether it did.
func (c *KVCache) register(id int32, h uint64) bool {
	b := &c.blocks[id]
	if b.hashed {
		return false
	}
	if c.byHash.Has(h) {
		return false
	}
	b.hash, b.hashed = h, true
	c.byHash.Put(h, id)
	return true
}

// Reset drops every cached block, as vLLM's reset_prefix_cache does, and
// tells the observer Cleared. Like vLLM it fails, returning false and
// changing nothing, while any block is referenced (a running or pinned
// sequence).
func (c *KVCache) Reset() bool {
	if c.refBlocks > 0 {
		return false
	}
	c.dropCached()
	if c.obs != nil {
		c.obs.Cleared()
	}
	return true
}

// ResetSilently drops every cached block, as Reset does, but keeps the
// hashed blocks that allocations reference (Reset would fail) and tells
// the observer nothing: a cache reset behind its event stream's back. It
// returns the blocks dropped and the hashed blocks kept. What it keeps is
// prefix-closed: an allocation references the whole prefix it matched.
func (c *KVCache) ResetSilently() (dropped, kept int) {
	dropped = c.dropCached()
	return dropped, c.byHash.Len()
}

// dropCached frees every cached block, forgetting its hash, and returns
// how many there were.
func (c *KVCache) dropCached() int {
	n := 0
	for c.lruHead >= 0 {
		id := c.lruHead
		c.lruUnlink(id)
		b := &c.blocks[id]
		c.byHash.Delete(b.hash)
		b.hash, b.hashed = 0, false
		c.free = append(c.free, id)
		n++
	}
	return n
}

// Release drops the allocation's references. Blocks left unreferenced
// become cached (when hashed) or free. Releasing twice is a no-op.
func (c *KVCache) Release(a *KVAlloc) {
	if a == nil || a.released {
		return
	}
	a.released = true
	// Tail blocks enter the LRU first, so they are evicted before the
	// prefix blocks that more sequences share.
	for i := len(a.blocks) - 1; i >= 0; i-- {
		id := a.blocks[i]
		b := &c.blocks[id]
		b.refs--
		if b.refs > 0 {
			continue
		}
		c.refBlocks--
		if b.hashed {
			c.lruPush(id)
		} else {
			c.free = append(c.free, id)
		}
	}
}

// ref adds a reference, moving a cached block out of the LRU.
func (c *KVCache) ref(id int32) {
	b := &c.blocks[id]
	if b.refs == 0 {
		c.refBlocks++
		if b.hashed {
			c.lruUnlink(id)
		}
	}
	b.refs++
}

// take returns a free block, evicting the least recently used cached block
// when none is free. The caller checked that one is available.
func (c *KVCache) take() int32 {
	if n := len(c.free); n > 0 {
		id := c.free[n-1]
		c.free = c.free[:n-1]
		return id
	}
	id := c.lruHead
	c.lruUnlink(id)
	b := &c.blocks[id]
	c.byHash.Delete(b.hash)
	if c.obs != nil {
		c.obs.Evicted(b.hash)
	}
	b.hash, b.hashed = 0, false
	return id
}

func (c *KVCache) lruPush(id int32) {
	b := &c.blocks[id]
	b.prev, b.next = c.lruTail, -1
	if c.lruTail >= 0 {
		c.blocks[c.lruTail].next = id
	} else {
		c.lruHead = id
	}
	c.lruTail = id
	c.lruLen++
}

func (c *KVCache) lruUnlink(id int32) {
	b := &c.blocks[id]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.lruHead = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.lruTail = b.prev
	}
	b.prev, b.next = -1, -1
	c.lruLen--
}

// KVStats is a snapshot of the cache's block states.
type KVStats struct {
	Capacity   int
	Referenced int
	Cached     int
	Free       int
}

// Stats returns the cache's block states.
func (c *KVCache) Stats() KVStats {
	return KVStats{Capacity: len(c.blocks), Referenced: c.refBlocks, Cached: c.lruLen, Free: len(c.free)}
}

// Usage is the fraction of blocks in use by running or pinned sequences,
// like vLLM's kv_cache_usage_perc (cached blocks count as free).
func (s KVStats) Usage() float64 { return float64(s.Referenced) / float64(s.Capacity) }

// Matched is how many leading blocks of the allocation were cache hits.
func (a *KVAlloc) Matched() int { return a.matched }

// BlockIDs returns a copy of the allocation's block ids, in sequence order.
func (a *KVAlloc) BlockIDs() []int32 { return append([]int32(nil), a.blocks...) }

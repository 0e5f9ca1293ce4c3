package model

// Observer is told when blocks become findable by their hash and when they
// stop being so: the events an engine publishes as KV cache events (vLLM's
// BlockStored, BlockRemoved and AllBlocksCleared, emitted by its BlockPool at
// the same points). A KVCache calls it synchronously from the method that
// caused the change, so calls are serialised by the cache's owner, in the
// order the changes happened. An Observer must not call back into the cache
// and should return quickly: it runs under the owner's lock. Slices it is
// passed are the caller's and valid only during the call.
type Observer interface {
	// Stored reports consecutive blocks of one sequence that were just
	// registered under their chained hashes (CommitTokens), in sequence
	// order.
	Stored(StoredBlocks)
	// Evicted reports that the cached block with hash was evicted to make
	// room for a new allocation.
	Evicted(hash uint64)
	// Cleared reports that Reset dropped every cached block.
	Cleared()
}

// StoredBlocks is one run of consecutive blocks registered by a commit.
type StoredBlocks struct {
	// Hashes are the blocks' chained hashes, in sequence order; never empty.
	Hashes []uint64
	// Parent is the chained hash of the block before Hashes[0]; valid only
	// when HasParent (false: Hashes[0] is the sequence's first block).
	Parent    uint64
	HasParent bool
	// First is the index of Hashes[0]'s block in its sequence.
	First int
	// Tokens are the blocks' tokens, BlockSize per block, or nil when the
	// committer passed too few tokens (Commit passes none).
	Tokens []int
	// BlockSize is the cache's tokens per block.
	BlockSize int
	// LoRA is the LoRA adapter the blocks' KV was computed with, as the
	// committer named it (CommitLoRA); "" for the base model.
	LoRA string
}

// SetObserver makes o the cache's observer; nil (the default) removes it, and
// then the cache does no work for observers.
func (c *KVCache) SetObserver(o Observer) { c.obs = o }

// stored reports blocks [from, to) of a sequence whose chained hashes are
// hashes and whose tokens are tokens (may be short, then none are passed),
// computed with the LoRA adapter lora ("" for none).
func (c *KVCache) stored(hashes []uint64, tokens []int, lora string, from, to int) {
	s := StoredBlocks{Hashes: hashes[from:to], First: from, BlockSize: c.blockSize, LoRA: lora}
	if from > 0 {
		s.Parent, s.HasParent = hashes[from-1], true
	}
	if len(tokens) >= to*c.blockSize {
		s.Tokens = tokens[from*c.blockSize : to*c.blockSize]
	}
	c.obs.Stored(s)
}

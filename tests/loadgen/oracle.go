package loadgen

import (
	"sync"

	"github.com/duet-serve/duet/tokenizer"
)

// Oracle measures the prefix reuse an ideal router with an unlimited KV
// cache could get: for each prompt, the longest block-aligned token prefix
// it shares with any prompt observed before it. Prompts are matched by
// chained block hashes, so block i matches only if every token up to the
// end of block i does. It is safe for concurrent use; the order of Observe
// calls is the order of "before".
type Oracle struct {
	blockSize int

	mu   sync.Mutex // guards seen
	seen map[uint64]struct{}
}

// NewOracle returns an empty oracle matching blocks of blockSize tokens.
func NewOracle(blockSize int) *Oracle {
	return &Oracle{blockSize: blockSize, seen: map[uint64]struct{}{}}
}

// Observe returns how many leading tokens of prompt an earlier prompt
// shared (a multiple of the block size), then remembers prompt.
func (o *Oracle) Observe(prompt []int) int {
	return o.ObserveHashes(tokenizer.BlockHashes(prompt, o.blockSize))
}

// ObserveHashes is Observe for a prompt whose chained block hashes (of the
// oracle's block size) are known.
func (o *Oracle) ObserveHashes(hashes []uint64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	hit := 0
	for hit < len(hashes) {
		if _, ok := o.seen[hashes[hit]]; !ok {
			break
		}
		hit++
	}
	for _, h := range hashes[hit:] {
		o.seen[h] = struct{}{}
	}
	return hit * o.blockSize
}

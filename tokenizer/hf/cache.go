package hf

import (
	"slices"
	"strings"
	"sync/atomic"
)

// The word cache remembers the tokens of words the model merged, as the
// Rust BPE model's cache does (utils/cache.rs, v0.22.2: words under 256
// bytes, 10,000 of them), so that text seen before (turn N of a chat
// re-sends turns 1..N-1) costs a look-up per word. It is a set-associative
// array of immutable entries: a look-up is a hash (shared with the
// vocabulary look-up), one atomic load per way and a string comparison,
// with no lock; a store replaces one way of the set. It is therefore
// bounded (cacheSets*cacheWays entries of under cacheMaxWord bytes each)
// and safe for concurrent use, and a word may be evicted by another that
// hashes to its set.

const (
	cacheSets    = 1 << 14
	cacheWays    = 2
	cacheMaxWord = 256 // words this long or longer are not cached
)

// cacheEntry is one cached word; never modified once stored.
type cacheEntry struct {
	word string
	ids  []int32
}

// wordCache is safe for concurrent use.
type wordCache struct {
	slots [cacheSets * cacheWays]atomic.Pointer[cacheEntry]
}

// get returns the tokens of word, whose hash is h, if cached.
func (c *wordCache) get(h uint64, word string) ([]int32, bool) {
	set := int(h&(cacheSets-1)) * cacheWays
	for w := range cacheWays {
		if e := c.slots[set+w].Load(); e != nil && e.word == word {
			return e.ids, true
		}
	}
	return nil, false
}

// put caches the tokens of word (ids is copied).
func (c *wordCache) put(h uint64, word string, ids []int32) {
	if len(word) >= cacheMaxWord {
		return
	}
	e := &cacheEntry{word: strings.Clone(word), ids: slices.Clone(ids)}
	set := int(h&(cacheSets-1)) * cacheWays
	way := int(h>>32) % cacheWays // a fixed way per word, so a word is stored once
	for w := range cacheWays {
		if c.slots[set+w].Load() == nil {
			way = w
			break
		}
	}
	c.slots[set+way].Store(e)
}

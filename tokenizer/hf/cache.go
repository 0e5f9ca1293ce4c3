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
// array of pointers to immutable entries: a look-up is a hash (shared with
// the vocabulary look-up), one atomic load per way and a comparison, with
// no lock; a store replaces one way of the set. An entry of a short word
// with few tokens is one 64-byte block, so a hit reads one cache line
// besides the slot. The cache is therefore bounded (cacheSets*cacheWays
// entries of under cacheMaxWord bytes each, at most ~20 MiB, ~3 MiB for
// prose) and safe for concurrent use; a word may be evicted by another
// that hashes to its set.

const (
	cacheSets    = 1 << 14
	cacheWays    = 2
	cacheMaxWord = 256 // words this long or longer are not cached
	inlineWord   = 22  // longest word held in an entry itself
	inlineIDs    = 8   // most tokens held in an entry itself
)

// cacheEntry is one cached word; never modified once stored. A short word
// with few tokens is held inline (long nil), any other in long.
type cacheEntry struct {
	n, k uint8 // inline word length and token count
	word [inlineWord]byte
	ids  [inlineIDs]int32
	long *longEntry
}

type longEntry struct {
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
		e := c.slots[set+w].Load()
		switch {
		case e == nil:
		case e.long == nil:
			if int(e.n) == len(word) && string(e.word[:e.n]) == word {
				return e.ids[:e.k], true
			}
		case e.long.word == word:
			return e.long.ids, true
		}
	}
	return nil, false
}

// put caches the tokens of word.
func (c *wordCache) put(h uint64, word string, ids []int32) {
	if len(word) >= cacheMaxWord {
		return
	}
	e := &cacheEntry{}
	if len(word) <= inlineWord && len(ids) <= inlineIDs {
		e.n, e.k = uint8(len(word)), uint8(len(ids))
		copy(e.word[:], word)
		copy(e.ids[:], ids)
	} else {
		e.long = &longEntry{word: strings.Clone(word), ids: slices.Clone(ids)}
	}
	set := int(h&(cacheSets-1)) * cacheWays
	way := int(h>>32) % cacheWays
	for w := range cacheWays {
		if c.slots[set+w].Load() == nil {
			way = w
			break
		}
	}
	c.slots[set+way].Store(e)
}

package hf

import (
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The segment cache remembers the tokens of whole stretches of text
// between added tokens in the raw text. The Rust tokenizer splits the raw
// text on added tokens first and encodes each stretch on its own
// (tokenizer/added_vocabulary.rs, v0.22.2), so a stretch's tokens depend
// only on its text and on whether it starts the text (Metaspace's "first"
// scheme): caching them is exact. A rendered chat prompt puts every
// message between special tokens, so turn N of a conversation, which
// re-sends turns 1..N-1, encodes only its new messages: a look-up per
// earlier message instead of a look-up per word (about 2.5 ms for 40k
// tokens of prose).
//
// Stretches of segmentMin to segmentMax bytes are cached, first in first
// out, within segmentBudget bytes of text and ids together.
const (
	segmentMin    = 256
	segmentMax    = 1 << 20
	segmentBudget = 64 << 20
)

type segmentKey struct {
	hash  uint64
	first bool // the stretch starts the text
}

type segment struct {
	text string
	ids  []int
}

// segmentCache is safe for concurrent use.
type segmentCache struct {
	// mu guards every field below.
	mu      sync.Mutex
	entries map[segmentKey]segment
	order   []segmentKey // insertion order, oldest first
	bytes   int
}

func segmentCost(text string, ids []int) int { return len(text) + 8*len(ids) }

// keyOf returns the key of a stretch, and false for one too short or too
// long to cache.
func keyOf(text string, first bool) (segmentKey, bool) {
	if len(text) < segmentMin || len(text) > segmentMax {
		return segmentKey{}, false
	}
	return segmentKey{xxhash.Sum64String(text), first}, true
}

// get returns the cached tokens of text, whose key is key.
func (c *segmentCache) get(key segmentKey, text string) ([]int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.entries[key]
	if !ok || s.text != text {
		return nil, false
	}
	return s.ids, true
}

// put caches the tokens of text, whose key is key; ids are copied.
func (c *segmentCache) put(key segmentKey, text string, ids []int) {
	s := segment{text: strings.Clone(text), ids: append([]int(nil), ids...)} // not a slice of a request kept alive
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[segmentKey]segment)
	}
	if old, ok := c.entries[key]; ok {
		c.bytes -= segmentCost(old.text, old.ids)
	} else {
		c.order = append(c.order, key)
	}
	c.entries[key] = s
	c.bytes += segmentCost(s.text, s.ids)
	for c.bytes > segmentBudget && len(c.order) > 0 {
		oldest := c.order[0]
		c.order = c.order[1:]
		if old, ok := c.entries[oldest]; ok {
			c.bytes -= segmentCost(old.text, old.ids)
			delete(c.entries, oldest)
		}
	}
}

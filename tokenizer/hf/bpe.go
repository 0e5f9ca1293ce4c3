package hf

import (
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of a tokenizer.json (models/bpe/model.rs,
// tokenizers v0.22.2): it turns one pre-tokenized word into token ids. It
// is immutable once loaded, apart from its word cache, and safe for
// concurrent use.
type bpe struct {
	vocab  *vocabTable // model-space string -> id
	tokens []string    // id -> the vocabulary's own string, for Decode
	merges *mergeTable
	// byteLevel: words are raw bytes and vocab holds the vocabulary
	// decoded from the ByteLevel alphabet; each byte is one character.
	byteLevel    bool
	ignoreMerges bool
	byteFallback bool
	fuseUnk      bool
	unk          int32      // id of unk_token, -1 without one
	byteToken    [256]int32 // id of "<0xXX>", -1 if absent
	// charID caches the id of each one-byte character (an ASCII rune, or
	// a byte of a byte-level word), -1 if it is not a token.
	charID [256]int32
	// byteChar is the ByteLevel alphabet's character for each byte, as
	// UTF-8: what byte fallback and unk see in byte-level mode.
	byteChar [256]string
	cache    wordCache
}

// appendWord appends the tokens of one word (non-empty) to out, as
// BPE::tokenize does: with ignore_merges a word that is a token is that
// token; else the cached tokens; else merge_word.
func (m *bpe) appendWord(out []int, word string, scratch *mergeScratch) []int {
	h := m.vocab.hash(word)
	if m.ignoreMerges {
		if id := m.vocab.find(h, word); id >= 0 {
			return append(out, int(id))
		}
	}
	if ids, ok := m.cache.get(h, word); ok {
		for _, id := range ids {
			out = append(out, int(id))
		}
		return out
	}
	ids := m.mergeWord(word, scratch)
	m.cache.put(h, word, ids)
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// mergeScratch is the scratch space of merging, reused through a pool.
type mergeScratch struct {
	ids   []int32
	ranks []uint32
	syms  []symbol
	heap  []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

// initial appends the characters of word to sc.ids as merge_word does:
// each character's token; else, with byte_fallback, the <0xXX> tokens of
// its bytes; else unk (consecutive unknowns fused into one with
// fuse_unk); else nothing, as the Rust model drops a character it has no
// token for.
func (m *bpe) initial(word string, sc *mergeScratch) {
	ids := sc.ids[:0]
	pendingUnk := false
	for i := 0; i < len(word); {
		var id int32
		var char string
		if m.byteLevel || word[i] < utf8.RuneSelf {
			id, char = m.charID[word[i]], word[i:i+1]
			if m.byteLevel {
				char = m.byteChar[word[i]]
			}
			i++
		} else {
			_, w := utf8.DecodeRuneInString(word[i:])
			char = word[i : i+w]
			id = m.vocab.get(char)
			i += w
		}
		if id >= 0 {
			if pendingUnk {
				ids, pendingUnk = append(ids, m.unk), false
			}
			ids = append(ids, id)
			continue
		}
		if m.byteFallback && m.fallback(char) {
			// The Rust model adds these before an unk still pending.
			for k := 0; k < len(char); k++ {
				ids = append(ids, m.byteToken[char[k]])
			}
			continue
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				ids = append(ids, m.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		ids = append(ids, m.unk)
	}
	sc.ids = ids
}

// fallback reports whether every byte of char has a <0xXX> token.
func (m *bpe) fallback(char string) bool {
	for k := 0; k < len(char); k++ {
		if m.byteToken[char[k]] < 0 {
			return false
		}
	}
	return true
}

// mergeWord returns the tokens of word after every merge (Word::merge_all
// in models/bpe/word.rs, v0.22.2): repeatedly the adjacent pair with the
// lowest merge rank, the leftmost on ties, is merged into its token. The
// result is scratch space, valid until sc is used again.
func (m *bpe) mergeWord(word string, sc *mergeScratch) []int32 {
	m.initial(word, sc)
	if len(sc.ids) <= smallWord {
		return m.mergeSmall(sc)
	}
	return m.mergeLarge(sc)
}

package tokenizer

import (
	"hash/maphash"
	"math/bits"
)

// rankTable maps token bytes to ranks (token ids) and back. Encoding looks
// every piece up whole, and mergeSmall about two byte strings per byte of
// the pieces it merges; for text the vocabulary does not cover (random
// letters or symbols) each look-up goes to a random entry, so the table is
// built to be small: 1- and 2-byte strings are indexed directly (256 KB),
// longer ones go through an open-addressing table of 8-byte slots (1 MB
// for cl100k_base, 2 MB for o200k_base) holding a 32-bit fingerprint of
// the bytes and the rank, and a fingerprint match is confirmed against the
// token's bytes, stored back to back in one arena. A small filter in front
// answers most look-ups of strings that are no token. mergeLarge looks
// merges up by token ids instead, in merges, built with the table (at
// startup, not by the first long piece a client sends). The table is
// immutable once built, and so is merges.
type rankTable struct {
	seed  maphash.Seed // per process, so colliding strings cannot be chosen in advance
	slots []uint64     // fingerprint<<32 | rank+1; 0 is empty
	mask  uint64
	// filter has two bits set per token longer than 2 bytes, both in one
	// 64-bit word chosen by the hash: a string with either bit clear is no
	// token. With about 11 bits per token (128 KB for cl100k_base) it
	// rejects ~97% of other strings before the slot table is read.
	filter     []uint64
	filterMask uint64
	maxLen     int // longest token, in bytes
	arena      string
	offs       []uint32 // token id -> start in arena; offs[id+1] is its end
	single     [256]uint32
	pair       [1 << 16]uint32 // s[0]<<8 | s[1] -> rank, noRank if not a token
	// merges maps two parts, by their ids, to the token they merge into.
	merges *pairTable
}

// newRankTable builds the table from tokens indexed by rank; "" marks an
// unused rank. Merging needs every single byte to be a token.
func newRankTable(tokens []string) *rankTable {
	t := &rankTable{seed: maphash.MakeSeed(), offs: make([]uint32, len(tokens)+1)}
	n, size := 0, 0
	for id, tok := range tokens {
		t.offs[id] = uint32(size)
		size += len(tok)
		if len(tok) > 2 {
			n++
		}
	}
	t.offs[len(tokens)] = uint32(size)
	arena := make([]byte, 0, size)
	for _, tok := range tokens {
		arena = append(arena, tok...)
	}
	t.arena = string(arena)
	for i := range t.single {
		t.single[i] = noRank
	}
	for i := range t.pair {
		t.pair[i] = noRank
	}
	// A load factor under 0.8 keeps linear probes short.
	t.slots = make([]uint64, 1<<bits.Len(uint(n+n/4)))
	t.mask = uint64(len(t.slots) - 1)
	t.filter = make([]uint64, 1<<bits.Len(uint(n/8)))
	t.filterMask = uint64(len(t.filter) - 1)
	for id, tok := range tokens {
		t.maxLen = max(t.maxLen, len(tok))
		switch len(tok) {
		case 0:
		case 1:
			t.single[tok[0]] = uint32(id)
		case 2:
			t.pair[uint16(tok[0])<<8|uint16(tok[1])] = uint32(id)
		default:
			h := maphash.String(t.seed, tok)
			t.filter[h>>32&t.filterMask] |= filterBits(h)
			i := h & t.mask
			for t.slots[i] != 0 {
				i = (i + 1) & t.mask
			}
			t.slots[i] = h>>32<<32 | uint64(id+1)
		}
	}
	t.merges = newPairTable(t)
	return t
}

// get returns the rank of the token whose bytes are s, or noRank.
func (t *rankTable) get(s string) uint32 {
	switch {
	case len(s) == 1:
		return t.single[s[0]]
	case len(s) == 2:
		return t.pair[uint16(s[0])<<8|uint16(s[1])]
	case len(s) == 0 || len(s) > t.maxLen:
		return noRank
	}
	h := maphash.String(t.seed, s)
	if b := filterBits(h); t.filter[h>>32&t.filterMask]&b != b {
		return noRank
	}
	fp := h >> 32
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return noRank
		}
		if v>>32 == fp {
			if id := uint32(v) - 1; t.token(int(id)) == s {
				return id
			}
		}
	}
}

// filterBits returns the two filter bits of hash h within its word.
func filterBits(h uint64) uint64 {
	return 1<<(h>>52&63) | 1<<(h>>58)
}

// token returns the bytes of token id, "" if id is no token.
func (t *rankTable) token(id int) string {
	if id < 0 || id+1 >= len(t.offs) {
		return ""
	}
	return t.arena[t.offs[id]:t.offs[id+1]]
}

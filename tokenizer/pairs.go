package tokenizer

import (
	"math/bits"
	"math/rand/v2"
)

// pairTable maps two adjacent parts of a piece being merged, by their
// token ids, to the token they merge into. mergeLarge looks every merge
// after the first byte pairs up here: the key is the two ids, already at
// hand, hashed with one multiply, and a match is exact, where a look-up by
// bytes hashes them and compares them with the token's.
//
// It holds one pair per token of 3 bytes or more: the two parts that
// byte-pair merging the token's own bytes ends with (its last merge); none
// for a token that merging its bytes does not reach. Merging meets no
// other pair: if adjacent parts a and b of a piece concatenate to a token
// t, the merges so far inside t's bytes are the first merges of t's own
// bytes, in the same order (each was the lowest-ranked pair of the whole
// piece, so of t, and none crossed t's ends, since a and b are parts), so
// a and b are the parts before t's last merge. Other ways to cut a token
// into two tokens (233k in all for cl100k_base's 96k tokens of 3 bytes or
// more) never meet.
//
// Slots are open-addressed, 8 bytes each, holding both ids and the result;
// as in rankTable a filter in front rejects most pairs that are no token
// without reading the slots: 1 MB of slots and 128 KB of filter for
// cl100k_base, twice that for o200k_base. It is immutable once built.
type pairTable struct {
	seed uint64 // per process, so colliding pairs cannot be chosen in advance
	// slots hold a<<(2*idBits) | b<<idBits | token+1; 0 is empty.
	slots      []uint64
	mask       uint64
	filter     []uint64 // as rankTable.filter
	filterMask uint64
}

// idBits is the width of a token id in a pairTable slot.
const idBits = 20

// maxTokens bounds the size of a table, so that every id, and noToken,
// fits in idBits bits (o200k_base has 200k tokens).
const maxTokens = 1<<idBits - 1

// noToken is an id no token has: a part that is not there, which merges
// with nothing.
const noToken = maxTokens

// newPairTable builds the pair table of ranks. It merges the bytes of
// every token, shortest first, looking the merges inside a token up in the
// table built so far, which holds the last merges of all shorter tokens:
// about 700k look-ups for cl100k_base, 15-20 ms on the development
// machine, 40-50 ms for o200k_base (BenchmarkLoadEncoding/*/merges).
func newPairTable(ranks *rankTable) *pairTable {
	n := 0
	byLen := make([][]uint32, ranks.maxLen+1)
	for id := range len(ranks.offs) - 1 {
		if tok := ranks.token(id); len(tok) > 2 {
			byLen[len(tok)] = append(byLen[len(tok)], uint32(id))
			n++
		}
	}
	t := &pairTable{seed: rand.Uint64()}
	// A load factor under 0.8 keeps linear probes short.
	t.slots = make([]uint64, 1<<bits.Len(uint(n+n/4)))
	t.mask = uint64(len(t.slots) - 1)
	t.filter = make([]uint64, 1<<bits.Len(uint(n/8)))
	t.filterMask = uint64(len(t.filter) - 1)
	var parts []part // start holds a token id here
	for _, ids := range byLen {
		for _, id := range ids {
			parts = t.lastMerge(ranks, ranks.token(int(id)), parts[:0])
			if len(parts) == 2 {
				t.add(uint32(parts[0].start), uint32(parts[1].start), id)
			}
		}
	}
	return t
}

// lastMerge merges the bytes of tok as mergeSmall does, with parts
// holding token ids in start, until two parts are left or no pair merges,
// and returns the parts.
func (t *pairTable) lastMerge(ranks *rankTable, tok string, parts []part) []part {
	for i := 0; i < len(tok); i++ {
		r := uint32(noRank)
		if i+1 < len(tok) {
			r = ranks.pair[uint16(tok[i])<<8|uint16(tok[i+1])]
		}
		parts = append(parts, part{int32(ranks.single[tok[i]]), r})
	}
	for len(parts) > 2 {
		i, minRank := -1, uint32(noRank)
		for j, p := range parts[:len(parts)-1] {
			if p.rank < minRank {
				i, minRank = j, p.rank
			}
		}
		if i < 0 {
			break
		}
		parts[i].start = int32(minRank)
		parts = append(parts[:i+1], parts[i+2:]...)
		if len(parts) == 2 {
			break // the two parts merge into tok
		}
		if i > 0 {
			parts[i-1].rank = t.get(uint32(parts[i-1].start), uint32(parts[i].start))
		}
		parts[i].rank = noRank
		if i+1 < len(parts) {
			parts[i].rank = t.get(uint32(parts[i].start), uint32(parts[i+1].start))
		}
	}
	return parts
}

// add records that parts a and b merge into token id.
func (t *pairTable) add(a, b, id uint32) {
	key := pairKey(a, b)
	h := t.hash(key)
	t.filter[h>>32&t.filterMask] |= filterBits(h)
	i := h & t.mask
	for t.slots[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = key<<idBits | uint64(id+1)
}

// pairKey packs two token ids.
func pairKey(a, b uint32) uint64 { return uint64(a)<<idBits | uint64(b) }

// hash mixes a pair key with the seed: one multiply, its high half folded
// into the low one (the filter rejects as many other pairs as with
// MurmurHash3's finalizer, 97%).
func (t *pairTable) hash(key uint64) uint64 {
	h := (key ^ t.seed) * 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// get returns the token that adjacent parts a and b merge into, or noRank.
func (t *pairTable) get(a, b uint32) uint32 {
	key := pairKey(a, b)
	h := t.hash(key)
	if f := filterBits(h); t.filter[h>>32&t.filterMask]&f != f {
		return noRank
	}
	return t.probe(h, key)
}

// get2 is get of two pairs at once: both filter words are read before
// either is tested, so that their cache misses overlap.
func (t *pairTable) get2(a1, b1, a2, b2 uint32) (uint32, uint32) {
	k1, k2 := pairKey(a1, b1), pairKey(a2, b2)
	h1, h2 := t.hash(k1), t.hash(k2)
	w1, w2 := t.filter[h1>>32&t.filterMask], t.filter[h2>>32&t.filterMask]
	f1, f2 := filterBits(h1), filterBits(h2)
	r1, r2 := uint32(noRank), uint32(noRank)
	if w1&f1 == f1 {
		r1 = t.probe(h1, k1)
	}
	if w2&f2 == f2 {
		r2 = t.probe(h2, k2)
	}
	return r1, r2
}

// probe looks key, whose hash is h, up in the slots.
func (t *pairTable) probe(h, key uint64) uint32 {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return noRank
		}
		if v>>idBits == key {
			return uint32(v&(1<<idBits-1)) - 1
		}
	}
}

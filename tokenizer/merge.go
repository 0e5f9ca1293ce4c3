package tokenizer

import (
	"math"
	"sync"
)

// Byte-pair merging of one piece. The rule is tiktoken's (openai/tiktoken
// src/lib.rs, v0.14.0, byte_pair_encode): repeatedly merge the adjacent
// pair of parts whose concatenated bytes have the lowest rank, the leftmost
// one on ties, until no adjacent pair is a token. Two algorithms apply it
// and return the same tokens (TestMergeLargeMatchesMergeSmall):
//
//   - mergeSmall is tiktoken's _byte_pair_merge, the only algorithm of
//     tiktoken-go v0.1.8, which duet used before: a vector of parts and a
//     linear scan for the minimum after each merge, O(n·m) for n bytes and
//     m merges. Fastest for the short pieces of real text, but 64 KiB of
//     "a" took 1.6 s.
//   - mergeLarge (tournament.go) plays the part of tiktoken's
//     _byte_pair_merge_large (added in v0.13.0, "Branch byte pair encoding
//     to fix performance on unusual input", the fix of openai/tiktoken#195),
//     which keeps candidate merges in a binary heap with lazy invalidation.
//     Here they sit in a 4-ary tournament tree over byte positions instead,
//     and merges are looked up by the token ids of the two parts
//     (pairTable) rather than by their bytes. O(n + m log n).
//
// tiktoken switches to its heap at 100 bytes; so does appendMerged.

// smallPieceBytes is the piece length from which mergeLarge is used.
const smallPieceBytes = 100

// noRank marks a pair that is not a token.
const noRank = math.MaxUint32

// part is one part of a piece in mergeSmall: its start and the rank of it
// merged with the next part.
type part struct {
	start int32
	rank  uint32
}

// merger holds the scratch space of one Encode call. It is not
// goroutine-safe; Encode takes one from mergers and puts it back.
type merger struct {
	enc      *encoding
	maxPiece int // see appendPiece
	// scratchLen is the length mergeLarge sizes its scratch for when it
	// must grow it: the longest piece the text can hold (the text's
	// length, at most maxPiece), so that the pieces of one text share one
	// allocation. FuzzParse: a 4 KB prompt of invalid UTF-8 decodes to
	// pieces of 4,351 and 7,647 bytes, and sizing for each in turn
	// allocated the scratch twice.
	scratchLen int
	parts      []part
	spans      []span
	tree       []uint64
	dirty      []int32 // leaves a sweep rewrote since the tree was last updated
	nodes      []int32 // updateLevels' scratch: tree nodes
	// ops counts rank look-ups and tournament steps: the cost model the
	// tests bound.
	ops int
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

func getMerger(e *encoding, maxPiece, textLen int) *merger {
	m := mergers.Get().(*merger)
	m.enc, m.maxPiece, m.scratchLen, m.ops = e, maxPiece, min(textLen, maxPiece), 0
	return m
}

func putMerger(m *merger) {
	m.enc = nil
	if len(m.spans) > maxPieceBytes { // a test merged a longer piece whole
		m.spans, m.tree, m.dirty, m.nodes = nil, nil, nil, nil
	}
	mergers.Put(m)
}

func (m *merger) rank(b string) uint32 {
	m.ops++
	return m.enc.ranks.get(b)
}

// appendMerged appends the tokens of piece (at least 2 bytes, not itself a
// token) to out.
func (m *merger) appendMerged(out []int, piece string) []int {
	if len(piece) < smallPieceBytes {
		return m.mergeSmall(out, piece)
	}
	return m.mergeLarge(out, piece)
}

func (m *merger) mergeSmall(out []int, piece string) []int {
	parts := m.parts[:0]
	minRank, minIdx := uint32(noRank), -1
	for i := 0; i < len(piece)-1; i++ {
		r := m.rank(piece[i : i+2])
		if r < minRank {
			minRank, minIdx = r, i
		}
		parts = append(parts, part{int32(i), r})
	}
	parts = append(parts, part{int32(len(piece) - 1), noRank}, part{int32(len(piece)), noRank})
	// rankAt is the rank of parts[i] merged with parts[i+1] after the
	// merge at i, before parts[i+1] is removed (hence i+3).
	rankAt := func(i int) uint32 {
		if i+3 < len(parts) {
			return m.rank(piece[parts[i].start:parts[i+3].start])
		}
		return noRank
	}
	for minRank != noRank {
		i := minIdx
		if i > 0 {
			parts[i-1].rank = rankAt(i - 1)
		}
		parts[i].rank = rankAt(i)
		parts = append(parts[:i+1], parts[i+2:]...)
		minRank, minIdx = noRank, -1
		for j, p := range parts[:len(parts)-1] {
			m.ops++
			if p.rank < minRank {
				minRank, minIdx = p.rank, j
			}
		}
	}
	for i := 0; i+1 < len(parts); i++ {
		out = append(out, int(m.enc.ranks.get(piece[parts[i].start:parts[i+1].start])))
	}
	m.parts = parts
	return out
}

// growTo returns s resliced to length n, reallocated with capacity
// max(n, capacity) if too short.
func growTo[T any](s []T, n, capacity int) []T {
	if cap(s) < n {
		return make([]T, n, max(n, capacity))
	}
	return s[:n]
}

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
//   - mergeLarge plays the part of tiktoken's _byte_pair_merge_large (added
//     in v0.13.0, "Branch byte pair encoding to fix performance on unusual
//     input", the fix of openai/tiktoken#195), which keeps candidate merges
//     in a binary heap with lazy invalidation. Here they sit in a 4-ary
//     tournament tree over byte positions instead: leaf i holds rank<<32|i
//     for the pair that starts at i, each inner node the minimum of its
//     children, so the root is the lowest rank, leftmost. A merge rewrites
//     three leaves (the merged part's next pair, its previous part's pair,
//     the vanished part's pair) and recomputes their ancestors only while a
//     minimum changes: no stale entries are queued and popped. A sweep of
//     one rank along a run ("aaaa…" merges every "aa" left to right) skips
//     the tree: when the next part starts a pair of the same rank and the
//     two rewritten pairs rank higher, that pair is the new minimum, and the
//     tree is brought up to date once when the sweep ends. O(n + m log n);
//     on 2 MiB of random letters in 8 KiB chunks about twice as fast as a
//     port of tiktoken's heap.
//
// tiktoken switches to its heap at 100 bytes; so does appendMerged.

// smallPieceBytes is the piece length from which mergeLarge is used.
const smallPieceBytes = 100

// noRank marks a pair that is not a token.
const noRank = math.MaxUint32

// noPair is a tournament leaf with no pair: it loses to every pair.
const noPair = math.MaxUint64

// part is one part of a piece in mergeSmall: its start and the rank of it
// merged with the next part.
type part struct {
	start int32
	rank  uint32
}

// span is the part that starts at a byte position in mergeLarge.
type span struct {
	prev int32  // start of the previous part; -1 for the first
	end  int32  // end of this part
	rank uint32 // token of this part once merged; noRank while one byte
}

// merger holds the scratch space of one Encode call. It is not
// goroutine-safe; Encode takes one from mergers and puts it back.
type merger struct {
	enc      *encoding
	maxPiece int // see appendPiece
	parts    []part
	spans    []span
	tree     []uint64
	dirty    []int32 // leaves rewritten since the tree was last updated
	nodes    []int   // update's scratch
	// ops counts rank look-ups and tournament steps: the cost model the
	// tests bound.
	ops int
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

func getMerger(e *encoding, maxPiece int) *merger {
	m := mergers.Get().(*merger)
	m.enc, m.maxPiece, m.ops = e, maxPiece, 0
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

func (m *merger) mergeLarge(out []int, piece string) []int {
	n := int32(len(piece))
	// A 4-ary tree, root 0, children of p at 4p+1..4p+4, leaves last.
	inner, width := 0, 1
	for width < len(piece) {
		inner += width
		width *= 4
	}
	spans := growTo(m.spans, len(piece))
	tree := growTo(m.tree, inner+width)
	leaves := tree[inner:]
	for i := int32(0); i < n; i++ {
		spans[i] = span{prev: i - 1, end: i + 1, rank: noRank}
		leaves[i] = m.leaf(piece, i, i+2)
	}
	for i := len(piece); i < width; i++ {
		leaves[i] = noPair
	}
	for p := inner - 1; p >= 0; p-- {
		tree[p] = min4(tree[4*p+1:][:4])
	}
	dirty := m.dirty[:0]
	for top := tree[0]; top != noPair; {
		left, rank := int32(uint32(top)), top>>32
		right := spans[left].end
		end := spans[right].end
		spans[left].end = end
		spans[left].rank = uint32(rank)
		next := uint64(noPair)
		if end < n {
			spans[end].prev = left
			next = m.leaf(piece, left, spans[end].end)
		}
		prevNext := uint64(noPair)
		prev := spans[left].prev
		if prev >= 0 {
			prevNext = m.leaf(piece, prev, end)
			leaves[prev] = prevNext
			if len(dirty) == 0 {
				dirty = append(dirty, prev)
			}
		}
		leaves[left], leaves[right] = next, noPair
		dirty = append(dirty, left, right)
		// A sweep: the pair just merged was the minimum, so any pair that
		// ties its rank starts after end (positions inside the merged
		// part start none), and every pair rewritten earlier in the sweep
		// ranks above it. If the pair at end has the same rank and both
		// pairs rewritten now rank above it, the pair at end is the new
		// minimum: merge it without updating the tree.
		if end < n && leaves[end]>>32 == rank && next>>32 > rank && prevNext>>32 > rank {
			top = leaves[end]
			continue
		}
		m.update(tree, inner, dirty)
		dirty = dirty[:0]
		top = tree[0]
	}
	m.dirty = dirty
	for i := int32(0); i < n; i = spans[i].end {
		if r := spans[i].rank; r != noRank {
			out = append(out, int(r))
		} else {
			out = append(out, int(m.enc.ranks.get(piece[i:i+1])))
		}
	}
	m.spans, m.tree = spans, tree
	return out
}

func min4(c []uint64) uint64 { return min(min(c[0], c[1]), min(c[2], c[3])) }

// leaf returns the tournament key of merging piece[start:end] (two parts),
// noPair if it is not a token or end is past the piece.
func (m *merger) leaf(piece string, start, end int32) uint64 {
	if int(end) > len(piece) {
		return noPair
	}
	r := m.rank(piece[start:end])
	if r == noRank {
		return noPair
	}
	return uint64(r)<<32 | uint64(start)
}

// update recomputes the ancestors of the rewritten leaves at the given
// positions, in increasing order, level by level while a minimum changes.
// The paths of neighbouring leaves join within a level or two, so a merge
// costs about one walk to the root, and a sweep of k merges about k/3.
func (m *merger) update(tree []uint64, inner int, pos []int32) {
	nodes := m.nodes[:0]
	for _, i := range pos {
		nodes = append(nodes, inner+int(i))
	}
	for len(nodes) > 0 {
		k, last := 0, -1
		for _, j := range nodes {
			if j == 0 {
				continue
			}
			p := (j - 1) / 4
			if p == last {
				continue
			}
			last = p
			m.ops++
			if v := min4(tree[4*p+1:][:4]); tree[p] != v {
				tree[p] = v
				nodes[k] = p
				k++
			}
		}
		nodes = nodes[:k]
	}
	m.nodes = nodes
}

// growTo returns s resliced to length n, reallocated if too short.
func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

package tokenizer

import "math"

// mergeLarge keeps the candidate merges of a piece in a 4-ary tournament
// tree over byte positions: leaf i holds rank<<32|i for the pair of parts
// that starts at i, each inner node the minimum of its children, so the
// root is the lowest rank, leftmost. A merge rewrites three leaves (the
// merged part's pair with the next part, the previous part's pair, the
// vanished part's pair), each pair looked up by the ids of its two parts
// in the pair table, and brings their ancestors up to date: no stale
// entries are queued and popped. A sweep of one rank along a run ("aaaa…"
// merges every "aa" left to right) skips the tree: when the next part
// starts a pair of the same rank and the two rewritten pairs rank higher,
// that pair is the new minimum, and the tree is brought up to date once
// when the sweep ends. On 2 MiB of random letters in 8 KiB chunks the tree
// was about twice as fast as a port of tiktoken's heap (both looking pairs
// up by bytes then).

// noPair is a tournament leaf with no pair: it loses to every pair, as
// does any key of rank noRank.
const noPair = math.MaxUint64

// span is the part that starts at a byte position in mergeLarge.
type span struct {
	prev int32  // start of the previous part; -1 for the first
	end  int32  // end of this part
	rank uint32 // token of this part
}

func (m *merger) mergeLarge(out []int, piece string) []int {
	n := int32(len(piece))
	// A 4-ary tree laid out as a heap, root 0, children of p at
	// 4p+1..4p+4: inner nodes 0..inner-1, then a leaf per byte and enough
	// noPair leaves to give the last inner node four children. The leaves
	// sit at two depths when len(piece) is not a power of 4, which the
	// updates allow; the array is about 4/3 of the leaves, not up to 4
	// times as with a full tree.
	inner := (len(piece) + 1) / 3 // ceil((len-1)/3)
	scratch := max(len(piece), m.scratchLen)
	spans := growTo(m.spans, len(piece), scratch)
	tree := growTo(m.tree, 4*inner+1, 4*((scratch+1)/3)+1)
	leaves := tree[inner:]
	ranks := m.enc.ranks
	merges := ranks.merges
	for i := int32(0); i < n; i++ {
		spans[i] = span{prev: i - 1, end: i + 1, rank: ranks.single[piece[i]]}
	}
	for i := int32(0); i+1 < n; i++ {
		leaves[i] = leafKey(ranks.pair[uint16(piece[i])<<8|uint16(piece[i+1])], i)
	}
	m.ops += len(piece) - 1
	for i := len(piece) - 1; i < len(leaves); i++ {
		leaves[i] = noPair
	}
	for p := inner - 1; p >= 0; p-- {
		tree[p] = min4(tree[4*p+1:][:4])
	}
	// Leaves a sweep rewrote, not yet in the tree: distinct positions, so
	// at most one per byte. It and updateLevels' nodes are sized here once,
	// as spans and tree are, rather than grown by doubling.
	dirty := growTo(m.dirty, len(piece), scratch)[:0]
	m.nodes = growTo(m.nodes, len(piece), scratch)
	for top := tree[0]; top>>32 != noRank; {
		left, rank := int32(uint32(top)), top>>32
		right := spans[left].end
		end := spans[right].end
		prev := spans[left].prev
		spans[left].end = end
		spans[left].rank = uint32(rank)
		before, after := uint32(noToken), uint32(noToken)
		if end < n {
			spans[end].prev = left
			after = spans[end].rank
		}
		if prev >= 0 {
			before = spans[prev].rank
		}
		rn, rp := merges.get2(uint32(rank), after, before, uint32(rank))
		m.ops += 2
		next, prevNext := leafKey(rn, left), uint64(noPair)
		if prev >= 0 {
			prevNext = leafKey(rp, prev)
			leaves[prev] = prevNext
		}
		leaves[left], leaves[right] = next, noPair
		// A sweep: the pair just merged was the minimum, so any pair that
		// ties its rank starts after end (positions inside the merged
		// part start none), and every pair rewritten earlier in the sweep
		// ranks above it. If the pair at end has the same rank and both
		// pairs rewritten now rank above it, the pair at end is the new
		// minimum: merge it without updating the tree.
		if end < n && leaves[end]>>32 == rank && next>>32 > rank && prevNext>>32 > rank {
			if len(dirty) == 0 && prev >= 0 {
				dirty = append(dirty, prev) // a later merge's prev is the left before
			}
			dirty = append(dirty, left, right)
			top = leaves[end]
			continue
		}
		if len(dirty) > 0 { // the last merge of a sweep
			dirty = append(dirty, left, right)
			m.updateLevels(tree, inner, dirty)
			dirty = dirty[:0]
		} else {
			m.updateMerge(tree, inner, prev, left, right)
		}
		top = tree[0]
	}
	m.dirty = dirty
	for i := int32(0); i < n; i = spans[i].end {
		out = append(out, int(spans[i].rank))
	}
	m.spans, m.tree = spans, tree
	return out
}

func min4(c []uint64) uint64 { return min(min(c[0], c[1]), min(c[2], c[3])) }

// leafKey returns the tournament key of a pair of rank r at start; with r
// noRank (no pair) it is above the key of every pair.
func leafKey(r uint32, start int32) uint64 {
	return uint64(r)<<32 | uint64(start)
}

// updateMerge brings the tree up to date after one merge, which rewrote
// the leaves at prev (if not negative), left and right. Left held the
// minimum, so every ancestor of left changes: they are recomputed without
// comparing. Then from prev and from right up while a minimum changes,
// usually not past a parent that left's walk recomputed. Once all leaves
// are written, a walk that changes a node recomputes its parent next, so
// the last recomputation of every node sees its children's final values.
func (m *merger) updateMerge(tree []uint64, inner int, prev, left, right int32) {
	ops := 0
	j := inner + int(left)
	for v := tree[j]; j > 0; ops++ {
		// The minimum of j's siblings and v, the value just stored at j,
		// kept in a register rather than read back.
		p, o := (j-1)>>2, (j-1)&3
		c := tree[4*p+1:][:4]
		v = min(v, c[(o+1)&3], c[(o+2)&3], c[(o+3)&3])
		tree[p] = v
		j = p
	}
	for _, i := range [2]int32{prev, right} {
		for j := inner + int(i); i >= 0 && j > 0; {
			j = (j - 1) >> 2
			ops++
			v := min4(tree[4*j+1:][:4])
			if tree[j] == v {
				break
			}
			tree[j] = v
		}
	}
	m.ops += ops
}

// updateLevels recomputes the ancestors of the rewritten leaves at the
// given positions, in increasing order, level by level while a minimum
// changes. The paths of neighbouring leaves join within a level or two, so
// a sweep of k merges costs about k/3 walks to the root.
func (m *merger) updateLevels(tree []uint64, inner int, pos []int32) {
	nodes := m.nodes[:len(pos)] // only shrinks from here
	for k, i := range pos {
		nodes[k] = int32(inner) + i
	}
	for len(nodes) > 0 {
		k, last := 0, int32(-1)
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

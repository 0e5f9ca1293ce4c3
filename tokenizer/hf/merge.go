package hf

// Two implementations of merge_all give the same tokens
// (TestMergeLargeMatchesSmall): mergeSmall, a rank per adjacent pair and a
// linear scan for the lowest after each merge, O(n²) for n characters but
// the fastest for the short words of real text; and mergeLarge for longer
// words (Gemma's pre-tokenizer makes a whole prompt one word): the
// candidate merges in a 4-ary min-heap of rank<<32|position, checked when
// popped against the pair now at that position and dropped if stale, as
// the Rust model does, so O((n + merges) log n).

// smallWord is the longest word, in initial symbols, that mergeSmall
// merges.
const smallWord = 48

// noMerge marks a pair that does not merge; it sorts after every merge.
const noMerge = ^uint64(0)

// pairKey returns rank<<32|id of merging a and b, or noMerge.
func (m *bpe) pairKey(a, b int32) uint64 {
	rank, id, ok := m.merges.get(a, b)
	if !ok {
		return noMerge
	}
	return uint64(rank)<<32 | uint64(uint32(id))
}

func (m *bpe) mergeSmall(sc *mergeScratch) []int32 {
	ids := sc.ids
	if len(ids) < 2 {
		return ids
	}
	pairs := sc.heap[:0] // pairs[i]: merging ids[i] and ids[i+1]
	for i := 0; i+1 < len(ids); i++ {
		pairs = append(pairs, m.pairKey(ids[i], ids[i+1]))
	}
	for {
		best, k := noMerge, -1
		for i, p := range pairs {
			if p>>32 < best>>32 { // lowest rank, leftmost on ties
				best, k = p, i
			}
		}
		if k < 0 {
			break
		}
		ids[k] = int32(uint32(best))
		ids = append(ids[:k+1], ids[k+2:]...)
		pairs = append(pairs[:k], pairs[k+1:]...)
		if k < len(pairs) {
			pairs[k] = m.pairKey(ids[k], ids[k+1])
		}
		if k > 0 {
			pairs[k-1] = m.pairKey(ids[k-1], ids[k])
		}
	}
	sc.heap = pairs
	return ids
}

// symbol is one part of a word in mergeLarge, linked to its neighbours by
// index; a part merged into its left neighbour is dead.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	dead       bool
}

func (m *bpe) mergeLarge(sc *mergeScratch) []int32 {
	n := len(sc.ids)
	syms := sc.syms[:0]
	for i, id := range sc.ids {
		syms = append(syms, symbol{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[n-1].next = -1
	h := minHeap(sc.heap[:0])
	for i := 0; i+1 < n; i++ {
		if rank, _, ok := m.merges.get(syms[i].id, syms[i+1].id); ok {
			h = append(h, uint64(rank)<<32|uint64(i))
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		rank, pos := uint32(top>>32), int32(uint32(top))
		s := &syms[pos]
		if s.dead || s.next < 0 {
			continue
		}
		r, id, ok := m.merges.get(s.id, syms[s.next].id)
		if !ok || r != rank { // stale: the pair at pos changed since
			continue
		}
		right := s.next
		s.id, s.next = id, syms[right].next
		syms[right].dead = true
		if s.next >= 0 {
			syms[s.next].prev = pos
			if r2, _, ok := m.merges.get(s.id, syms[s.next].id); ok {
				h.push(uint64(r2)<<32 | uint64(pos))
			}
		}
		if s.prev >= 0 {
			if r2, _, ok := m.merges.get(syms[s.prev].id, s.id); ok {
				h.push(uint64(r2)<<32 | uint64(s.prev))
			}
		}
	}
	ids := sc.ids[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	sc.syms, sc.heap, sc.ids = syms, h, ids
	return ids
}

// minHeap is a 4-ary min-heap of uint64 keys.
type minHeap []uint64

func (h minHeap) init() {
	if len(h) < 2 {
		return
	}
	for i := (len(h) - 2) / 4; i >= 0; i-- {
		h.down(i)
	}
}

func (h *minHeap) push(k uint64) {
	*h = append(*h, k)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 4
		if s[p] <= k {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = k
}

func (h *minHeap) pop() uint64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	if last > 0 {
		h.down(0)
	}
	return top
}

func (h minHeap) down(i int) {
	k := h[i]
	for {
		c := 4*i + 1
		if c >= len(h) {
			break
		}
		best := c
		for j := c + 1; j < c+4 && j < len(h); j++ {
			if h[j] < h[best] {
				best = j
			}
		}
		if h[best] >= k {
			break
		}
		h[i] = h[best]
		i = best
	}
	h[i] = k
}

package hf

import "hash/maphash"

// vocabTable maps token strings, in the form the model sees them (raw
// bytes for a byte-level vocabulary), to ids: open addressing over ids,
// each probe comparing the string it points to. It is immutable once
// built and shares its hash seed with the word cache so that a word is
// hashed once for both.
type vocabTable struct {
	seed  maphash.Seed
	slots []int32  // id+1, 0 for an empty slot; len a power of 2
	keys  []string // id -> string ("" for ids without one)
}

func newVocabTable(seed maphash.Seed, keys []string) *vocabTable {
	n := 1
	for n < 2*len(keys) {
		n *= 2
	}
	v := &vocabTable{seed: seed, slots: make([]int32, n), keys: keys}
	for id, k := range keys {
		if k == "" {
			continue
		}
		for i := v.hash(k) & uint64(n-1); ; i = (i + 1) & uint64(n-1) {
			if v.slots[i] == 0 {
				v.slots[i] = int32(id) + 1
				break
			}
		}
	}
	return v
}

func (v *vocabTable) hash(s string) uint64 { return maphash.String(v.seed, s) }

// find returns the id of s, whose hash is h, or -1.
func (v *vocabTable) find(h uint64, s string) int32 {
	mask := uint64(len(v.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		id := v.slots[i] - 1
		if id < 0 {
			return -1
		}
		if v.keys[id] == s {
			return id
		}
	}
}

// get returns the id of s, or -1.
func (v *vocabTable) get(s string) int32 { return v.find(v.hash(s), s) }

// mergeTable maps a pair of token ids to the rank of their merge (its
// index in the merges list) and the id it produces, by open addressing.
// It is immutable once built.
type mergeTable struct {
	keys  []uint64 // left<<32 | right; emptyPair for an empty slot
	vals  []uint64 // rank<<32 | new id
	shift uint
}

const emptyPair = ^uint64(0)

func newMergeTable(n int) *mergeTable {
	size, shift := 1, uint(64)
	for size < n+n/2+1 {
		size *= 2
		shift--
	}
	m := &mergeTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: shift}
	for i := range m.keys {
		m.keys[i] = emptyPair
	}
	return m
}

func (m *mergeTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> m.shift }

// put sets the merge of (a, b); a later put of the same pair replaces the
// earlier one, as the Rust BPE builder's map collection does.
func (m *mergeTable) put(a, b int32, rank, id uint32) {
	key := uint64(a)<<32 | uint64(uint32(b))
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(key); ; i = (i + 1) & mask {
		if m.keys[i] == emptyPair || m.keys[i] == key {
			m.keys[i], m.vals[i] = key, uint64(rank)<<32|uint64(id)
			return
		}
	}
}

// get returns the rank and result of merging a and b; ok false when the
// pair does not merge.
func (m *mergeTable) get(a, b int32) (rank uint32, id int32, ok bool) {
	key := uint64(a)<<32 | uint64(uint32(b))
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(key); ; i = (i + 1) & mask {
		switch m.keys[i] {
		case key:
			v := m.vals[i]
			return uint32(v >> 32), int32(uint32(v)), true
		case emptyPair:
			return 0, 0, false
		}
	}
}

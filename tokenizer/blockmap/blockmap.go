// Package blockmap is a map from block hashes to int32 for the KV cache
// models that look blocks up by their chained hash (the simulator's cache,
// the router's cache index). Their keys are hash values, already uniform,
// and they delete as often as they insert (every eviction), which leaves
// Go's built-in map probing through tombstones; this one is open
// addressing with linear probing and backward-shift deletion, so a delete
// leaves nothing behind and lookups stay a probe or two at its load of at
// most one half.
package blockmap

// Map maps uint64 keys to int32 values. The zero value is not usable: use
// New. Not goroutine-safe.
type Map struct {
	keys []uint64
	vals []int32
	used []bool
	mask uint64
	n    int
}

// New returns a map sized for about n entries without growing.
func New(n int) *Map {
	size := 8
	for size < 2*n {
		size <<= 1
	}
	return &Map{keys: make([]uint64, size), vals: make([]int32, size), used: make([]bool, size), mask: uint64(size - 1)}
}

// Len is the number of entries.
func (m *Map) Len() int { return m.n }

// slot is where key k's probe sequence starts (keys are hashes already;
// the multiply mixes their low bits anyway, for keys that are not).
func (m *Map) slot(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> 32 & m.mask }

// Get returns key k's value and whether it is present.
func (m *Map) Get(k uint64) (int32, bool) {
	for i := m.slot(k); m.used[i]; i = (i + 1) & m.mask {
		if m.keys[i] == k {
			return m.vals[i], true
		}
	}
	return 0, false
}

// Has reports whether key k is present.
func (m *Map) Has(k uint64) bool {
	_, ok := m.Get(k)
	return ok
}

// Put sets key k's value.
func (m *Map) Put(k uint64, v int32) {
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	i := m.slot(k)
	for ; m.used[i]; i = (i + 1) & m.mask {
		if m.keys[i] == k {
			m.vals[i] = v
			return
		}
	}
	m.keys[i], m.vals[i], m.used[i] = k, v, true
	m.n++
}

// Delete removes key k if present. The entries after it in its probe run
// move back, so no tombstone is left.
func (m *Map) Delete(k uint64) {
	i := m.slot(k)
	for ; m.used[i]; i = (i + 1) & m.mask {
		if m.keys[i] == k {
			break
		}
	}
	if !m.used[i] {
		return
	}
	m.n--
	for j := (i + 1) & m.mask; m.used[j]; j = (j + 1) & m.mask {
		home := m.slot(m.keys[j])
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.used[i] = false
}

// Clear removes every entry, keeping the memory.
func (m *Map) Clear() {
	clear(m.used)
	m.n = 0
}

func (m *Map) grow() {
	old := *m
	*m = *New(len(old.keys))
	for i, u := range old.used {
		if u {
			m.Put(old.keys[i], old.vals[i])
		}
	}
}

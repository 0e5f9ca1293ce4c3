package blockmap

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The map agrees with Go's map over a long random run of puts, gets and
// deletes on a small key space (long probe runs, wrap-around, growth).
func TestMapAgreesWithBuiltinMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m, ref := New(4), map[uint64]int32{}
	for i := 0; i < 200_000; i++ {
		k := uint64(r.IntN(300))
		if r.IntN(4) == 0 {
			k <<= 40 // keys that collide in the low bits too
		}
		switch r.IntN(3) {
		case 0:
			v := int32(r.IntN(1000))
			m.Put(k, v)
			ref[k] = v
		case 1:
			m.Delete(k)
			delete(ref, k)
		default:
			v, ok := m.Get(k)
			w, wok := ref[k]
			require.Equal(t, wok, ok, "key %d", k)
			require.Equal(t, w, v, "key %d", k)
		}
		require.Equal(t, len(ref), m.Len())
	}
	for k, v := range ref {
		got, ok := m.Get(k)
		require.True(t, ok)
		require.Equal(t, v, got)
	}
	m.Clear()
	require.Zero(t, m.Len())
	require.False(t, m.Has(0))
}

func TestZeroKey(t *testing.T) {
	m := New(1)
	require.False(t, m.Has(0))
	m.Put(0, 7)
	v, ok := m.Get(0)
	require.True(t, ok)
	require.Equal(t, int32(7), v)
	m.Delete(0)
	require.False(t, m.Has(0))
}

// BenchmarkChurn is an LRU's steady state: one delete and one insert per
// operation on a full map of 65,536 entries, and a lookup.
func BenchmarkChurn(b *testing.B) {
	const n = 1 << 16
	m := New(n)
	for i := range n {
		m.Put(uint64(i)*0x9e3779b97f4a7c15, int32(i))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.Delete(uint64(i) * 0x9e3779b97f4a7c15)
		m.Put(uint64(i+n)*0x9e3779b97f4a7c15, int32(i))
		m.Has(uint64(i+n/2) * 0x9e3779b97f4a7c15)
	}
}

func BenchmarkChurnBuiltin(b *testing.B) {
	const n = 1 << 16
	m := make(map[uint64]int32, n)
	for i := range n {
		m[uint64(i)*0x9e3779b97f4a7c15] = int32(i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		delete(m, uint64(i)*0x9e3779b97f4a7c15)
		m[uint64(i+n)*0x9e3779b97f4a7c15] = int32(i)
		_ = m[uint64(i+n/2)*0x9e3779b97f4a7c15]
	}
}
